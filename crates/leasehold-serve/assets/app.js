// leasehold serve: live updates and countdowns. Served by the binary; the
// Content-Security-Policy allows this file and nothing else to run.
"use strict";
(function () {
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var source = null;
  var received = performance.now();
  var fetching = false;
  var again = false;
  // A refresh that failed (its connection refused or closed under load, the
  // server restarting) is tried again — 1 s, 2 s, 4 s, then every 10 s —
  // until one arrives: the change it was for sends no second event, so
  // without this the page would show the old state until the next change.
  var failures = 0;
  var retry = null;

  // Time left as the server reported it when the fragment arrived, less
  // what this page's monotonic clock says has passed since: the browser's
  // wall clock is never used. Durations read as the server writes them
  // (src/text.rs, `duration`): 250ms, 4.5s, 2m 5s, 1h 30m, 7 days.
  function duration(ms) {
    if (ms < 1000) return ms + "ms";
    if (ms < 10000) {
      var tenths = Math.floor((ms + 50) / 100);
      return (tenths % 10 ? Math.floor(tenths / 10) + "." + (tenths % 10) : tenths / 10) + "s";
    }
    var s = Math.floor(ms / 1000);
    var d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60, sec = s % 60;
    if (d) return d + (d === 1 ? " day" : " days") + (h ? " " + h + "h" : "");
    if (h) return h + "h" + (m ? " " + m + "m" : "");
    if (m) return m + "m" + (sec ? " " + sec + "s" : "");
    return sec + "s";
  }
  function tick() {
    var passed = performance.now() - received;
    var spans = document.querySelectorAll(".countdown[data-ms]");
    for (var i = 0; i < spans.length; i++) {
      var left = Math.round(Number(spans[i].getAttribute("data-ms")) - passed);
      // A countdown to something due rather than an expiry says so at 0.
      spans[i].textContent = left <= 0 ? (spans[i].getAttribute("data-zero") || "expired") : duration(left);
      spans[i].classList.toggle("soon", left < 5000);
    }
    // "held since …": how long ago, counting up the same way.
    var agos = document.querySelectorAll(".ago[data-ms]");
    for (var j = 0; j < agos.length; j++) {
      var ago = Math.round(Number(agos[j].getAttribute("data-ms")) + passed);
      agos[j].textContent = ago < 1000 ? "just now" : duration(ago) + " ago";
    }
  }

  // A timeline wider than the screen scrolls in its box: start at its
  // right end, where "now" is.
  function showNow() {
    document.querySelectorAll(".scroll > svg.chart").forEach(function (svg) {
      var box = svg.parentNode;
      if (box.scrollWidth > box.clientWidth) box.scrollLeft = box.scrollWidth;
    });
  }

  function showLive() { live.textContent = "● live"; live.className = ""; }
  function showReconnecting() { live.textContent = "● reconnecting"; live.className = "off"; }

  function refresh() {
    if (fetching) { again = true; return; }
    if (retry !== null) { clearTimeout(retry); retry = null; }
    fetching = true;
    var url = new URL(window.location.href);
    url.searchParams.set("partial", "1");
    fetch(url.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        failures = 0;
        if (source && source.readyState === EventSource.OPEN) showLive();
        // Keep what the user is typing in a filter box.
        var active = document.activeElement;
        if (active && active.form && main.contains(active)) return;
        var open = {};
        main.querySelectorAll("details[open]").forEach(function (d, i) { open[i] = true; });
        main.innerHTML = html; // the server escaped every value in it
        main.querySelectorAll("details").forEach(function (d, i) { if (open[i]) d.open = true; });
        received = performance.now();
        tick();
        showNow();
      })
      .catch(function () {
        showReconnecting();
        failures += 1;
        if (!document.hidden) retry = setTimeout(refresh, Math.min(10000, 1000 * Math.pow(2, failures - 1)));
      })
      .then(function () {
        fetching = false;
        if (again) { again = false; refresh(); }
      });
  }

  function connect() {
    if (source || document.hidden) return;
    source = new EventSource("/events");
    // A stream (re)connected: what changed while there was none sent no
    // event, so fetch the present once.
    source.addEventListener("hello", function () { if (failures === 0) showLive(); refresh(); });
    source.addEventListener("change", function () { refresh(); });
    source.onerror = function () {
      showReconnecting();
      // Refused (every stream place taken, 503) or not a stream: the
      // browser gives up on it; try again as the server's Retry-After says.
      if (source.readyState === EventSource.CLOSED) {
        source = null;
        setTimeout(connect, 10000);
      }
    };
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
  showNow();
})();
