//! What the soaks (the broker's disruption soak, the operator's drain soak) share: a seeded
//! generator the whole run follows from, and the numbers they read from the environment.

/// A small seeded generator (splitmix64): the whole run follows from the seed.
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// A generator of its own for one part of the run (a client, a loop).
    pub fn child(&mut self) -> Rng {
        Rng(self.next())
    }
}

/// `key` as a number, `default` when unset; `random` draws one below 1,000,000 (printed by
/// the soak, so the run can be replayed).
pub fn env_number(key: &str, default: u64) -> u64 {
    match std::env::var(key) {
        Ok(v) if v == "random" => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos();
            u64::from(nanos) % 1_000_000
        }
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v}: a number or random")),
        Err(_) => default,
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_same_seed_gives_the_same_run_within_bounds() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        for _ in 0..1000 {
            let x = a.range(3, 9);
            assert!((3..=9).contains(&x));
            assert_eq!(x, b.range(3, 9));
        }
        assert_eq!(a.child().range(0, 1 << 40), b.child().range(0, 1 << 40));
    }
}
