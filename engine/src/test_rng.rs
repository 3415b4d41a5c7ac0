//! A seeded random source for checks against a reference (the engine's tests and `gpu-check`): fresh
//! per run, its seed printed so a failure can be replayed with `DOCQA_TEST_SEED`. xorshift64*, so a seed
//! means the same inputs on every machine; [`crate::synth`] draws its random checkpoints from it too.

/// xorshift64*: enough randomness for test inputs; a clone draws the same sequence.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `DOCQA_TEST_SEED` or the clock; prints `{label}: DOCQA_TEST_SEED=…` to
    /// stderr.
    pub fn fresh(label: &str) -> Self {
        let seed = std::env::var("DOCQA_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{label}: DOCQA_TEST_SEED={seed}");
        Rng(seed | 1)
    }

    /// A generator for `seed` (scrambled by splitmix64, so neighbouring seeds give unrelated streams).
    pub fn seeded(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Rng(if z == 0 { 1 } else { z })
    }

    /// Next raw value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// `n` uniform values times `scale`.
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }

    /// Uniform integer in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `0..n` in random order.
    pub fn permutation(&mut self, n: usize) -> Vec<u32> {
        let mut p: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            p.swap(i, self.below(i + 1));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_values_and_a_permutation_holds_every_index_once() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        assert_eq!(a.vec(5, 1.0), b.vec(5, 1.0));
        assert!(a.vec(1000, 1.0).iter().all(|x| (-1.0..1.0).contains(x)));
        let mut p = a.permutation(50);
        p.sort_unstable();
        assert_eq!(p, (0..50).collect::<Vec<u32>>());
    }
}
