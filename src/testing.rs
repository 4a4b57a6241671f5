//! Helpers shared by the crate's unit tests.

/// xorshift64*: a fixed-seed generator for the hand-rolled property tests (the same seed gives
/// the same cases on every run and machine).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True `percent` % of the time.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// In `0..=n`.
    pub(crate) fn upto(&mut self, n: u64) -> usize {
        self.below(n + 1) as usize
    }
}
