//! Splicing edits into the original JSON bytes, so untouched parts stay byte-exact.
