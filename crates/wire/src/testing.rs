//! Helpers shared by this crate's unit tests.

/// A log sink for unit tests: a shared buffer every clone writes into (a `tracing`
/// subscriber's writer).
#[derive(Clone, Default)]
pub(crate) struct LogBuf(pub(crate) std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogBuf {
    /// Everything written so far, as text.
    #[allow(clippy::unwrap_used)]
    pub(crate) fn text(&self) -> String {
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
