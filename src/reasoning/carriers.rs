//! Captured reasoning carriers between the response that produced them and the request that
//! echoes their turn: the lookup the restore pass reads ([`TurnLookup`]).
//!
//! A captured turn ([`CapturedTurn`]) is kept per (credential scope, upstream host, model as
//! the request named it, turn fingerprint); see `docs/reasoning.md#carrier-restore`.

use crate::response::fingerprint::Fingerprint;
use crate::response::turn::CapturedTurn;

/// Where the restore pass finds captured turns: one request's view (its credential scope
/// and upstream host are fixed by whoever builds it).
#[allow(dead_code)] // read by the restore pass (being built)
pub(crate) trait TurnLookup {
    /// The turn captured with fingerprint `fp` from a response of `model` (as the request
    /// named it), if this request's credential may see it. `None` when unknown.
    fn find(&self, model: &str, fp: &Fingerprint) -> Option<CapturedTurn>;
}

/// Knows no turn (restore off).
impl TurnLookup for () {
    fn find(&self, _model: &str, _fp: &Fingerprint) -> Option<CapturedTurn> {
        None
    }
}

/// Tests: a fixed set of turns, whatever the model.
#[cfg(test)]
impl TurnLookup for std::collections::HashMap<Fingerprint, CapturedTurn> {
    fn find(&self, _model: &str, fp: &Fingerprint) -> Option<CapturedTurn> {
        self.get(fp).cloned()
    }
}
