//! The view of the kernel: what we last read or wrote of our part of the kernel, at a sign of
//! the kernel's, so that the next reconcile can plan against it instead of reading every rule
//! again (Felix's table syncer keeps the same). One type, [`View`], with one life cycle; the
//! daemon keeps its view in memory, the command line in the state directory.
//!
//! * **Taken** after a whole reading, only when the sign did not move while the rules were
//!   read; or after a write, only when the sign moved by that write alone: an nf_tables
//!   generation by exactly the transactions the write committed, an x_tables digest under the
//!   xtables lock held from the reading before the write to the reading after it.
//! * **Used** only while it is certainly still the kernel's: it names the program's version,
//!   the backend, the families and the network namespace it was taken in (the boot's id and
//!   the namespace's cookie, which no other namespace of the boot has), and the kernel's sign
//!   now is the view's. What the sign does not cover (ipsets, for the iptables backends) is
//!   read again every time.
//! * **Dropped** on anything else: a backend without a sign, a sign that cannot be read, a
//!   lock that cannot be taken, a foreign commit, a failed write, a repair. The next reconcile
//!   then reads the whole kernel.
//!
//! A view kept on disk (`Lasting::Disk`) needs the nf_tables generation: the x_tables digest
//! ([`crate::dataplane::xtables::digest`]) is keyed with secrets of the process that takes it,
//! so it means nothing to the next command, and the command line does not hold the xtables
//! lock between a plan and its write. iptables-legacy's saves are also the cheapest reading of
//! the three backends.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Outcome, Read, ReconcileError, apply_against, reconcile};
use crate::dataplane::{Coverage, Dataplane, DataplaneError, Hold, Host, Sign, Stamp};
use crate::model::IpFamily;
use crate::state::State;

/// The view's format and the program's version: a view another version wrote is not read.
const FORMAT: &str = concat!("view 2, nodeport-guard ", env!("CARGO_PKG_VERSION"));

/// How long a view is to last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lasting {
    /// While this process runs (the daemon).
    Process,
    /// From one command to the next (the state directory).
    Disk,
}

/// What a view was taken of: a view is only ever read by the same program, of the same
/// backend's families, in the same network namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Origin {
    format: String,
    backend: String,
    families: Vec<IpFamily>,
    /// [`crate::dataplane::Kernel::namespace_identity`]; a view on disk always has one.
    namespace: Option<String>,
}

impl Origin {
    fn of(dataplane: &Dataplane<'_>, namespace: Option<String>) -> Origin {
        Origin {
            format: FORMAT.to_owned(),
            backend: dataplane.backend.name().to_owned(),
            families: dataplane.families.clone(),
            namespace,
        }
    }
}

/// What the kernel held of ours at a sign of the kernel's (see the module's documentation).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct View {
    origin: Origin,
    sign: Stamp,
    /// Without counters. The daemon's view shares the desired state it wrote rather than
    /// keeping a copy.
    state: Arc<State>,
}

impl View {
    /// The families the view was taken of.
    pub fn families(&self) -> &[IpFamily] {
        &self.origin.families
    }

    /// Whether nothing has been committed to nf_tables since the view was taken, read through
    /// `dataplane` (of the view's families): the generation is still the view's. Only an
    /// nf_tables generation says so without holding a lock; ipsets are outside it.
    pub fn is_current(&self, dataplane: &Dataplane<'_>) -> bool {
        dataplane.backend.sign() == Sign::NfGeneration
            && self.origin == Origin::of(dataplane, dataplane.kernel.namespace_identity())
            && dataplane.sign() == Some(self.sign)
    }

    /// The view without its state, for a daemon at rest: when the view's state is `applied`
    /// (which the daemon packs anyway) it is given back by [`ViewAside::with_state`]; else the
    /// view's own state is packed with it.
    pub fn set_aside(self, applied: &Arc<State>) -> ViewAside {
        let state = if Arc::ptr_eq(&self.state, applied) {
            None
        } else {
            Some(crate::state::PackedState::pack(&self.state))
        };
        ViewAside {
            origin: self.origin,
            sign: self.sign,
            state,
        }
    }
}

/// A [`View`] set aside by [`View::set_aside`].
#[derive(Debug)]
pub struct ViewAside {
    origin: Origin,
    sign: Stamp,
    /// The view's state when it was not the applied state.
    state: Option<crate::state::PackedState>,
}

impl ViewAside {
    /// The view again, its state `applied` (the applied state unpacked) or its own.
    pub fn with_state(self, applied: &Arc<State>) -> View {
        View {
            origin: self.origin,
            sign: self.sign,
            state: self
                .state
                .map_or_else(|| Arc::clone(applied), |own| Arc::new(own.unpack())),
        }
    }
}

/// The first reading of the kernel before a plan: the sign, what it does not cover (ipsets)
/// read beside it when there is a view to trust, and for iptables-legacy the xtables lock,
/// held from then on. The daemon takes it on a thread while it compiles (the x_tables digest
/// takes tens of milliseconds at thousands of rules) and hands it to [`reconcile_after`].
pub struct FirstRead<'r> {
    /// The host holding the xtables lock (iptables-legacy).
    locked: Option<Box<dyn Host + 'r>>,
    /// What a view taken now would be of, and the sign then; `None`: no sign to trust (none
    /// read, or the lock not taken).
    start: Option<(Origin, Stamp)>,
    /// The view refreshed, read at the start.
    refreshed: Option<Result<State, DataplaneError>>,
}

impl<'r> FirstRead<'r> {
    /// The daemon's first reading, with its `cached` view.
    pub fn take(dataplane: &Dataplane<'r>, cached: Option<&View>) -> FirstRead<'r> {
        FirstRead::lasting(dataplane, cached, Lasting::Process)
    }

    fn lasting(
        dataplane: &Dataplane<'r>,
        cached: Option<&View>,
        lasting: Lasting,
    ) -> FirstRead<'r> {
        let unsigned = FirstRead {
            locked: None,
            start: None,
            refreshed: None,
        };
        if dataplane.backend.sign_covers() == Coverage::Nothing
            || (lasting == Lasting::Disk && dataplane.backend.sign() != Sign::NfGeneration)
        {
            return unsigned;
        }
        let namespace = dataplane.kernel.namespace_identity();
        if lasting == Lasting::Disk && namespace.is_none() {
            return unsigned;
        }
        let origin = Origin::of(dataplane, namespace);
        let cached = cached.filter(|view| view.origin == origin);
        let locked = match dataplane.backend.hold_writers_off(dataplane.kernel) {
            Hold::Unneeded => None,
            Hold::Held(host) => Some(host),
            Hold::Unavailable => return unsigned,
        };
        let reader = under(dataplane, locked.as_deref());
        let (start, refreshed) = match cached {
            Some(cached) => std::thread::scope(|scope| {
                let refreshed = scope.spawn(|| reader.backend.refresh(&reader, &cached.state));
                let start = reader.sign();
                (start, Some(crate::dataplane::runner::joined(refreshed)))
            }),
            None => (reader.sign(), None),
        };
        FirstRead {
            locked,
            start: start.map(|start| (origin, start)),
            refreshed,
        }
    }

    /// Whether the reading was taken for `dataplane`'s families (or reads nothing of them: a
    /// reconcile without a sign reads the kernel whole anyway). One taken ahead, for the
    /// families of the view, is of no use to a reconcile of other families.
    pub fn is_for(&self, dataplane: &Dataplane<'_>) -> bool {
        self.start
            .as_ref()
            .is_none_or(|(origin, _)| origin.families == dataplane.families)
    }

    /// Reads the kernel through `reader` (under the lock this holds): `cached`, refreshed,
    /// when the sign is still its, else whole.
    fn observe(
        start: Option<(Origin, Stamp)>,
        refreshed: Option<Result<State, DataplaneError>>,
        reader: &Dataplane<'_>,
        cached: Option<View>,
    ) -> Observation {
        let Some((origin, start)) = start else {
            return Observation::whole(reader.observe(), None);
        };
        match (cached, refreshed) {
            (Some(cached), Some(refreshed)) if cached.origin == origin && cached.sign == start => {
                Observation {
                    state: refreshed,
                    read: Read::Cached,
                    valid: Some((origin, start)),
                    save: None,
                }
            }
            _ => {
                let state = reader.observe();
                // Read in one piece only if nothing changed while it was read.
                let unmoved = reader.sign() == Some(start);
                Observation::whole(state, unmoved.then_some((origin, start)))
            }
        }
    }
}

/// A [`FirstRead`] taken ahead, while the daemon waits out a burst of file events, for the
/// reconcile at its end: only where nothing needs holding (the nf_tables generation counts
/// every writer's commits). A commit of another program's in between moves the generation past
/// the view's: the reconcile then reads the kernel whole, or, if it came after the reading,
/// the view is dropped after the write and that commit's notification brings a check. Sets the
/// sign does not cover (ipsets) are as old as the reading.
pub struct Prefetched {
    start: Option<(Origin, Stamp)>,
    refreshed: Option<Result<State, DataplaneError>>,
}

impl Prefetched {
    /// Takes the first reading of the kernel through `dataplane` with the `cached` view, when
    /// `dataplane`'s backend needs nothing held for it.
    pub fn take(dataplane: &Dataplane<'_>, cached: Option<&View>) -> Option<Prefetched> {
        if dataplane.backend.sign() != Sign::NfGeneration {
            return None;
        }
        let first = FirstRead::take(dataplane, cached);
        first.locked.is_none().then_some(Prefetched {
            start: first.start,
            refreshed: first.refreshed,
        })
    }

    /// The reading, for [`reconcile_after`].
    pub fn into_first<'r>(self) -> FirstRead<'r> {
        FirstRead {
            locked: None,
            start: self.start,
            refreshed: self.refreshed,
        }
    }
}

/// `dataplane`, under the xtables lock when `locked` holds it.
fn under<'s>(dataplane: &Dataplane<'s>, locked: Option<&'s dyn Host>) -> Dataplane<'s> {
    match locked {
        Some(host) => dataplane.holding(host),
        None => dataplane.clone(),
    }
}

/// What [`observe`] read, and what to keep of it.
#[derive(Debug)]
pub struct Observation {
    /// Our part of the kernel.
    pub state: Result<State, DataplaneError>,
    /// Whether it was read whole or taken from the view.
    pub read: Read,
    /// What a view of `state` is of, and the sign at which `state` is the kernel's, when that
    /// is certain.
    valid: Option<(Origin, Stamp)>,
    /// A view to keep: the state, read whole while the sign stood still.
    pub save: Option<View>,
}

impl Observation {
    fn whole(state: Result<State, DataplaneError>, valid: Option<(Origin, Stamp)>) -> Observation {
        Observation {
            state,
            read: Read::Whole,
            valid,
            save: None,
        }
    }
}

/// The view after a write that committed `commits` nf_tables transactions and was verified,
/// from a kernel read at `valid`: `desired`, when the sign moved by that write alone.
fn view_after(
    valid: (Origin, Stamp),
    dataplane: &Dataplane<'_>,
    commits: u32,
    desired: Arc<State>,
) -> Option<View> {
    let (origin, from) = valid;
    let now = dataplane.sign()?;
    now.follows(from, commits).then_some(View {
        origin,
        sign: now,
        state: desired,
    })
}

/// The command line's reading of our part of the kernel: from `saved` when it is still the
/// kernel's (and what the sign does not cover read again), else whole, keeping a view of it
/// when that is certain.
pub fn observe(dataplane: &Dataplane<'_>, saved: Option<View>) -> Observation {
    let first = FirstRead::lasting(dataplane, saved.as_ref(), Lasting::Disk);
    let mut observed = FirstRead::observe(first.start, first.refreshed, dataplane, saved);
    if let (Read::Whole, Some((origin, sign)), Ok(state)) =
        (observed.read, &observed.valid, &observed.state)
    {
        observed.save = Some(View {
            origin: origin.clone(),
            sign: *sign,
            state: Arc::new(state.without_counters()),
        });
    }
    observed
}

/// The command line's view after a write from `observed` that committed `commits` nf_tables
/// transactions and was verified.
pub fn after_write(
    dataplane: &Dataplane<'_>,
    observed: &Observation,
    commits: u32,
    desired: &State,
) -> Option<View> {
    let valid = observed.valid.clone()?;
    view_after(
        valid,
        dataplane,
        commits,
        Arc::new(desired.without_counters()),
    )
}

/// Like [`reconcile`], planning against the `cache` the daemon keeps when the kernel's sign
/// says the kernel has not changed since it was taken, and leaving in `cache` what the kernel
/// holds afterwards when that is certain (see the module's documentation).
pub fn reconcile_cached(
    dataplane: &Dataplane<'_>,
    desired: &Arc<State>,
    cache: &mut Option<View>,
) -> Result<(Outcome, Read), ReconcileError> {
    let first = FirstRead::take(dataplane, cache.as_ref());
    reconcile_after(dataplane, desired, cache, first)
}

/// [`reconcile_cached`] after its [`FirstRead`], taken of the same kernel with the `cache` of
/// now.
pub fn reconcile_after(
    dataplane: &Dataplane<'_>,
    desired: &Arc<State>,
    cache: &mut Option<View>,
    first: FirstRead<'_>,
) -> Result<(Outcome, Read), ReconcileError> {
    let cached = cache.take();
    if first.start.is_none() {
        return reconcile(dataplane, desired).map(|outcome| (outcome, Read::Whole));
    }
    let dataplane = under(dataplane, first.locked.as_deref());
    let Observation {
        state, read, valid, ..
    } = FirstRead::observe(first.start, first.refreshed, &dataplane, cached);
    let outcome = apply_against(&dataplane, desired, state.map_err(ReconcileError::Observe)?)?;
    // Written and verified, or found to need nothing: either way the kernel holds what the
    // planner compares of `desired`, so the view shares it rather than keeping a copy.
    *cache =
        valid.and_then(|valid| view_after(valid, &dataplane, outcome.commits, Arc::clone(desired)));
    Ok((outcome, read))
}
