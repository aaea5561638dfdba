// leasehold serve: live updates and countdowns. Served by the binary; the
// Content-Security-Policy allows this file and nothing else to run.
"use strict";
(function () {
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var generation = document.getElementById("generation");
  var source = null;
  var received = performance.now();
  var fetching = false;
  var again = false;

  // Time left as the server reported it when the fragment arrived, less
  // what this page's monotonic clock says has passed since: the browser's
  // wall clock is never used.
  function human(ms) {
    if (ms <= 0) return "expired";
    if (ms < 1000) return ms + "ms";
    var s = Math.floor(ms / 1000), out = [];
    var d = Math.floor(s / 86400); s -= d * 86400;
    var h = Math.floor(s / 3600); s -= h * 3600;
    var m = Math.floor(s / 60); s -= m * 60;
    if (d) out.push(d + "days");
    if (h) out.push(h + "h");
    if (m) out.push(m + "m");
    if (s || !out.length) out.push(s + "s");
    return out.join(" ");
  }
  function tick() {
    var passed = performance.now() - received;
    var spans = document.querySelectorAll(".countdown[data-ms]");
    for (var i = 0; i < spans.length; i++) {
      var left = Math.round(Number(spans[i].getAttribute("data-ms")) - passed);
      spans[i].textContent = human(left);
      spans[i].classList.toggle("soon", left < 5000);
    }
  }

  function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    var url = new URL(window.location.href);
    url.searchParams.set("partial", "1");
    fetch(url.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        // Keep what the user is typing in a filter box.
        var active = document.activeElement;
        if (active && active.form && main.contains(active)) return;
        var open = {};
        main.querySelectorAll("details[open]").forEach(function (d, i) { open[i] = true; });
        main.innerHTML = html; // the server escaped every value in it
        main.querySelectorAll("details").forEach(function (d, i) { if (open[i]) d.open = true; });
        received = performance.now();
        tick();
      })
      .catch(function () { live.textContent = "● reconnecting"; })
      .then(function () {
        fetching = false;
        if (again) { again = false; refresh(); }
      });
  }

  function connect() {
    if (source || document.hidden) return;
    source = new EventSource("/events");
    source.addEventListener("hello", function () { live.textContent = "● live"; live.className = ""; });
    source.addEventListener("change", function (e) {
      if (generation) generation.textContent = e.data;
      refresh();
    });
    source.onerror = function () { live.textContent = "● reconnecting"; live.className = "off"; };
  }
  function disconnect() {
    if (source) { source.close(); source = null; }
    live.textContent = "❚❚ paused (tab hidden)";
    live.className = "off";
  }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { disconnect(); } else { connect(); refresh(); }
  });
  connect();
  setInterval(tick, 250);
  tick();
})();
