//! The command line's view of the kernel: what one command read or wrote of our part of the
//! kernel, kept under the state directory with the kernel's sign at that moment, so that the
//! next command can plan against it instead of reading every rule again, as the daemon does
//! with its cached view ([`super::Cached`]).
//!
//! A view is used only while it is certainly still the kernel's:
//!
//! * it names the backend, the families, the program's version and the network namespace it
//!   was taken in (the boot's id and the namespace's cookie, which no other namespace of the
//!   boot has): a view of another namespace or another boot is never read;
//! * the kernel's nf_tables generation now is the view's: it moves with every commit anyone
//!   makes in the namespace. What it does not cover (ipsets, for iptables-nft) is read every
//!   time.
//!
//! A view is kept after a whole reading only when the generation did not move while it was
//! read, and after a write only when it moved by exactly the transactions the write committed.
//! Anything else keeps no view, and the next command reads the whole kernel.
//!
//! iptables-legacy keeps none: x_tables have no generation, and the digest the daemon reads
//! instead ([`crate::dataplane::xtables::digest`]) is keyed with secrets of the process that
//! takes it, so it means nothing to the next command. Its saves are also the cheapest reading
//! of the three backends.

use serde::{Deserialize, Serialize};

use super::Read;
use crate::dataplane::{Coverage, Dataplane, DataplaneError, Sign, Stamp};
use crate::model::IpFamily;
use crate::state::State;

/// The view's format and the program's version: a view another version wrote is not read.
const FORMAT: &str = concat!("view 1, nodeport-guard ", env!("CARGO_PKG_VERSION"));

/// What a command read or wrote of our part of the kernel, at a sign of the kernel's.
#[derive(Debug, Serialize, Deserialize)]
pub struct SavedView {
    /// [`FORMAT`].
    format: String,
    /// The backend that read or wrote it.
    backend: String,
    /// The families it covers.
    families: Vec<IpFamily>,
    /// The namespace it was taken in ([`crate::dataplane::Kernel::namespace_identity`]).
    namespace: String,
    /// The kernel's sign then.
    sign: Stamp,
    /// Our part of the kernel then, without counters.
    state: State,
}

impl SavedView {
    fn new(dataplane: &Dataplane<'_>, namespace: String, sign: Stamp, state: &State) -> Self {
        SavedView {
            format: FORMAT.to_owned(),
            backend: dataplane.backend.name().to_owned(),
            families: dataplane.families.clone(),
            namespace,
            sign,
            state: state.without_counters(),
        }
    }

    /// Whether this view was taken by this program of this backend's families in this
    /// namespace (its sign is another question).
    fn is_of(&self, dataplane: &Dataplane<'_>, namespace: &str) -> bool {
        self.format == FORMAT
            && self.backend == dataplane.backend.name()
            && self.families == dataplane.families
            && self.namespace == namespace
    }
}

/// What [`observe`] read, and what to keep of it.
#[derive(Debug)]
pub struct Observation {
    /// Our part of the kernel.
    pub state: Result<State, DataplaneError>,
    /// Whether it was read whole or taken from the saved view.
    pub read: Read,
    /// The namespace and the nf_tables generation it was read at, when a write may keep a
    /// view after it ([`after_write`]), and the families read.
    start: Option<(String, Stamp, Vec<IpFamily>)>,
    /// A view to save: the state, read whole while the sign stood still.
    pub save: Option<SavedView>,
}

impl Observation {
    fn whole(state: Result<State, DataplaneError>) -> Observation {
        Observation {
            state,
            read: Read::Whole,
            start: None,
            save: None,
        }
    }
}

/// Reads our part of the kernel: from `saved` when it is still the kernel's (and what the
/// sign does not cover read again), else whole, keeping a view of it when that is certain.
pub fn observe(dataplane: &Dataplane<'_>, saved: Option<SavedView>) -> Observation {
    if dataplane.backend.sign_covers() == Coverage::Nothing
        || dataplane.backend.sign() != Sign::NfGeneration
    {
        return Observation::whole(dataplane.observe());
    }
    let Some(namespace) = dataplane.kernel.namespace_identity() else {
        return Observation::whole(dataplane.observe());
    };
    let saved = saved.filter(|view| view.is_of(dataplane, &namespace));
    let Some(start) = dataplane.sign() else {
        return Observation::whole(dataplane.observe());
    };
    if let Some(view) = saved
        && view.sign == start
    {
        return Observation {
            state: dataplane.backend.refresh(dataplane, &view.state),
            read: Read::Cached,
            start: Some((namespace, start, dataplane.families.clone())),
            save: None,
        };
    }
    let state = dataplane.observe();
    let unmoved = dataplane.sign() == Some(start);
    let save = match (&state, unmoved) {
        (Ok(state), true) => Some(SavedView::new(dataplane, namespace.clone(), start, state)),
        _ => None,
    };
    Observation {
        state,
        read: Read::Whole,
        start: unmoved.then(|| (namespace, start, dataplane.families.clone())),
        save,
    }
}

/// The view to keep after a write that committed `commits` nf_tables transactions and was
/// verified: `desired`, when the generation moved from the observation's by exactly those.
pub fn after_write(
    dataplane: &Dataplane<'_>,
    observed: &Observation,
    commits: u32,
    desired: &State,
) -> Option<SavedView> {
    let (namespace, start, families) = observed.start.clone()?;
    let now = dataplane.sign()?;
    let observer = Dataplane {
        families,
        ..dataplane.clone()
    };
    (matches!(start, Stamp::Generation(_)) && now.follows(start, commits))
        .then(|| SavedView::new(&observer, namespace, now, desired))
}
