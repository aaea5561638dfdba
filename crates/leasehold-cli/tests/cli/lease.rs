//! acquire / renew / release / fence / status / list / history.

use crate::util::Env;

#[test]
fn acquire_prints_the_token_and_a_second_acquire_is_held() {
    let env = Env::new();
    let t = env.acquire(&["job", "--ttl", "2m"]);
    assert!(t >= 1);
    let (code, out, err) = env.run(&["acquire", "job"]);
    assert_eq!(code, 11, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("job is held") && err.contains(&format!("token {t}")),
        "{err}"
    );
}
