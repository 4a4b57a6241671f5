//! Helpers shared by the crate's unit tests.

/// xorshift64*: a fixed-seed generator for the hand-rolled property tests (the same seed gives
/// the same cases on every run and machine).
pub struct Rng(pub u64);

impl Rng {
    #[allow(clippy::should_implement_trait)] // a seeded xorshift, not an iterator
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True `percent` % of the time.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// In `0..=n`.
    pub fn upto(&mut self, n: u64) -> usize {
        self.below(n + 1) as usize
    }
}

/// A log sink for unit tests: a shared buffer every clone writes into (a `tracing`
/// subscriber's writer). The integration tests have their own (`tests/common`): they see only
/// the crate's public items.
#[derive(Clone, Default)]
pub struct LogBuf(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogBuf {
    /// Everything written so far, as text.
    #[allow(clippy::unwrap_used)]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogBuf {
    #[allow(clippy::unwrap_used)]
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuf {
    type Writer = LogBuf;
    fn make_writer(&'a self) -> LogBuf {
        self.clone()
    }
}
