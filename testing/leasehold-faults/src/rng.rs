//! A small seeded generator (`SplitMix64`): reproducible random points,
//! names and fuzz inputs without a dependency. Every case prints its seed;
//! `LEASEHOLD_SEED=N` replays it.

/// `SplitMix64` (Steele, Lea, Flood 2014).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `LEASEHOLD_SEED`, else from the clock; the
    /// seed is printed so that a failure can be replayed.
    #[must_use]
    pub fn from_env(case: &str) -> Self {
        let seed = std::env::var("LEASEHOLD_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, leasehold::duration_nanos)
            });
        eprintln!("{case}: seed {seed} (replay with LEASEHOLD_SEED={seed})");
        Self(seed)
    }

    #[must_use]
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A random byte string of length `0..max_len`, biased towards the bytes
    /// parsers care about (digits, separators, quotes, NUL, high bytes).
    pub fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        const INTERESTING: &[u8] = b"0123456789 .:/-_+~\"'\\{}[],=\n\r\t\0\xff\xc3\xa9smhdu";
        let len = self.below(max_len as u64 + 1) as usize;
        (0..len)
            .map(|_| {
                if self.below(4) == 0 {
                    self.next_u64() as u8
                } else {
                    INTERESTING[self.below(INTERESTING.len() as u64) as usize]
                }
            })
            .collect()
    }

    /// Pick one of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}
