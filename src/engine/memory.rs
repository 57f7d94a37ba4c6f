//! What the engine keeps between one reconcile and the next for a long-running caller (the
//! daemon): the validated files, the compiled policy chains, the rendered chains and sets,
//! and the view of the kernel. Each is only a shortcut: the result is always what a full
//! computation gives (`tests/incremental.rs`, `tests/incremental_validate.rs`).

use std::sync::Arc;
use std::time::Instant;

use super::Engine;
use crate::compile;
use crate::facts::HostFacts;
use crate::model::{IpFamily, Model};
use crate::policy_set::{self, PolicySet};
use crate::reconcile;
use crate::state::State;

/// The memos and the kernel view a long-running caller keeps across reconciles.
#[derive(Default)]
pub struct Memory {
    /// The policy files checked at the last read: a reload parses and validates only the files
    /// that changed.
    parse: policy_set::Cache,
    /// The policy chains last compiled: a reload compiles only the policies that changed.
    compile: compile::Memo,
    /// The state last rendered: a reload renders only the chains and sets that changed.
    render: crate::state::RenderMemo,
    /// What the kernel holds of ours at a sign of the kernel's, while nobody else changes it
    /// (see [`reconcile::reconcile_cached`]).
    view: Option<reconcile::View>,
    /// The view while its caller rests ([`Memory::set_aside`]).
    view_aside: Option<reconcile::ViewAside>,
}

impl Memory {
    /// Forgets the view of the kernel: the next reconcile reads the whole kernel.
    pub fn forget_view(&mut self) {
        self.view = None;
        self.view_aside = None;
    }

    /// Lets go of the rule lines of `applied`, the state last applied, wherever the memos and
    /// the view hold them, for a caller at rest that keeps `applied` packed
    /// ([`crate::state::PackedState`]). A view of another state keeps its own, packed too.
    /// [`Memory::take_back`] with `applied` unpacked undoes it; until then the memory works as
    /// an empty one would (a whole reading of the kernel, a render of every chain).
    pub fn set_aside(&mut self, applied: &Arc<State>) {
        if let Some(view) = self.view.take() {
            self.view_aside = Some(view.set_aside(applied));
        }
        self.render.set_aside(applied);
    }

    /// Undoes [`Memory::set_aside`], `applied` being the state it was given, unpacked.
    pub fn take_back(&mut self, applied: &Arc<State>) {
        if let Some(aside) = self.view_aside.take()
            && self.view.is_none()
        {
            self.view = Some(aside.with_state(applied));
        }
        self.render.take_back(applied);
    }

    /// Forgets the compile and render memos (the policy chains compiled, and the rules and
    /// members each chain and set was rendered from), for a caller that has long been at
    /// rest: they serve only to build the next state faster, and they were most of a resting
    /// daemon's heap, in many small allocations that also kept the pages around them from
    /// being given back (`docs/performance.md`). The view and the validated files are kept
    /// (reading and checking a thousand files again costs more than compiling them). The next
    /// compile and render do every chain: about 40-60 ms at 1,000 policies.
    pub fn forget_memos(&mut self) {
        self.compile = compile::Memo::default();
        self.render = crate::state::RenderMemo::default();
    }

    /// How many policy chains the last compile reused and compiled, and how many chains the
    /// last render rendered, for the log.
    pub fn last_work(&self) -> (usize, usize, usize) {
        let compile = self.compile.last_compile();
        (
            compile.reused,
            compile.compiled,
            self.render.last_render().1,
        )
    }
}

/// What a reconcile compiles and renders, before it reads or writes the kernel.
pub struct Rendered {
    /// The compiled policies.
    pub compiled: compile::Compiled,
    /// The state rendered from them.
    pub desired: Arc<State>,
    /// When compiling ended.
    pub compiled_at: Instant,
    /// When rendering ended.
    pub desired_at: Instant,
}

/// What a reconcile compiled and rendered, and how it went.
pub struct Reconciled {
    /// The compiled policies.
    pub compiled: compile::Compiled,
    /// The state rendered from them.
    pub desired: Arc<State>,
    /// When compiling ended.
    pub compiled_at: Instant,
    /// When rendering ended.
    pub desired_at: Instant,
    /// The reconcile's outcome and how it read the kernel.
    pub result: Result<(reconcile::Outcome, reconcile::Read), reconcile::ReconcileError>,
}

impl<'a> Engine<'a> {
    /// Reads the policy directory through `memory`, as a policy set. A missing directory reads
    /// as an empty set (a ConfigMap or confd glitch, or a directory being replaced), which the
    /// caller's empty-set guard then catches.
    pub fn load(&self, memory: &mut Memory) -> PolicySet {
        if !self.settings.config.policies_dir.is_dir() {
            return PolicySet::missing();
        }
        policy_set::load_cached(
            std::slice::from_ref(&self.settings.config.policies_dir),
            self.settings.load,
            &mut memory.parse,
        )
    }

    /// Compiles and renders `model` through `memory` and reconciles the kernel with it,
    /// planning against `memory`'s view while the kernel's sign allows. With a view to check,
    /// the first reading of the kernel (the sign, the ipsets it does not cover, and for
    /// iptables-legacy the xtables lock) is taken on a thread meanwhile: the digest of
    /// x_tables' rules and `ipset save` of thousands of members each take about as long as the
    /// compile. For x_tables, whose digest is read under the lock, reading it early leaves the
    /// reconcile exact (the lock is only held a little longer). An nf_tables generation read
    /// early only widens the window in which another program's commit goes unplanned; the
    /// write then moves the generation by more than its own commits, so the view is dropped,
    /// and that commit's change notification brings a check that reads the kernel whole.
    pub fn reconcile(&self, memory: &mut Memory, model: &Model, facts: &HostFacts) -> Reconciled {
        // Of the view's families: the families compiled now are only known after the compile,
        // and a view is only used for the families it was taken of.
        let ahead = memory
            .view
            .as_ref()
            .map(|view| (self.dataplane(view.families().to_vec()), Some(view.clone())));
        std::thread::scope(|scope| {
            let first = ahead.as_ref().map(|(dataplane, cached)| {
                scope.spawn(move || reconcile::FirstRead::take(dataplane, cached.as_ref()))
            });
            let rendered = self.render(memory, model, facts);
            let first = first.map(crate::dataplane::runner::joined);
            self.write_rendered(memory, rendered, first)
        })
    }

    /// What the daemon does ahead of a reconcile, while it waits for a burst of file events
    /// to end: compiles and renders `model` through `memory` and, on a thread meanwhile, takes
    /// the first reading of the kernel where that can wait ([`reconcile::Prefetched`]).
    pub fn render_ahead(
        &self,
        memory: &mut Memory,
        model: &Model,
        facts: &HostFacts,
    ) -> (Rendered, Option<reconcile::Prefetched>) {
        let ahead = memory
            .view
            .as_ref()
            .map(|view| (self.dataplane(view.families().to_vec()), view.clone()));
        std::thread::scope(|scope| {
            let prefetched = ahead.as_ref().map(|(dataplane, cached)| {
                scope.spawn(move || reconcile::Prefetched::take(dataplane, Some(cached)))
            });
            let rendered = self.render(memory, model, facts);
            let prefetched = prefetched.and_then(crate::dataplane::runner::joined);
            (rendered, prefetched)
        })
    }

    /// Compiles and renders `model` through `memory`, without the kernel.
    pub fn render(&self, memory: &mut Memory, model: &Model, facts: &HostFacts) -> Rendered {
        let compiled =
            compile::compile_with(model, &self.settings.config, facts, &mut memory.compile);
        let compiled_at = Instant::now();
        let desired = self
            .backend
            .desired_with(&compiled.ruleset, &mut memory.render);
        Rendered {
            compiled,
            desired,
            compiled_at,
            desired_at: Instant::now(),
        }
    }

    /// Whether nf_tables has had no commit since `memory`'s view was taken (see
    /// [`reconcile::View::is_current`]): a change notification was then the echo of our own
    /// write.
    pub fn kernel_unmoved(&self, memory: &Memory) -> bool {
        memory
            .view
            .as_ref()
            .is_some_and(|view| view.is_current(&self.dataplane(view.families().to_vec())))
    }

    /// Reconciles the kernel with `desired`, the state of `families` last applied, without
    /// compiling anything: for a check that only the kernel can have made necessary (the
    /// files and the host as they were).
    pub fn reconcile_again(
        &self,
        memory: &mut Memory,
        desired: &Arc<State>,
        families: Vec<IpFamily>,
    ) -> Result<(reconcile::Outcome, reconcile::Read), reconcile::ReconcileError> {
        let dataplane = self.dataplane(families);
        let first = reconcile::FirstRead::take(&dataplane, memory.view.as_ref());
        reconcile::reconcile_after(&dataplane, desired, &mut memory.view, first)
    }

    /// Reconciles the kernel with `rendered`, compiled and rendered ahead (see
    /// [`Engine::reconcile`]), from the first reading `prefetched` with it when there is one.
    pub fn reconcile_rendered(
        &self,
        memory: &mut Memory,
        rendered: Rendered,
        prefetched: Option<reconcile::Prefetched>,
    ) -> Reconciled {
        self.write_rendered(
            memory,
            rendered,
            prefetched.map(reconcile::Prefetched::into_first),
        )
    }

    fn write_rendered(
        &self,
        memory: &mut Memory,
        rendered: Rendered,
        first: Option<reconcile::FirstRead<'a>>,
    ) -> Reconciled {
        let Rendered {
            compiled,
            desired,
            compiled_at,
            desired_at,
        } = rendered;
        let dataplane = self.dataplane(compiled.ruleset.ip_families());
        let first = match first.filter(|first| first.is_for(&dataplane)) {
            Some(first) => first,
            None => reconcile::FirstRead::take(&dataplane, memory.view.as_ref()),
        };
        let result = reconcile::reconcile_after(&dataplane, &desired, &mut memory.view, first);
        Reconciled {
            compiled,
            desired,
            compiled_at,
            desired_at,
            result,
        }
    }

    /// Puts `desired` back whatever the kernel holds, reading it whole, and forgets `memory`'s
    /// view (whatever was written, the next reconcile reads the whole kernel again).
    pub fn repair(
        &self,
        memory: &mut Memory,
        desired: &State,
        families: Vec<IpFamily>,
    ) -> Result<reconcile::Outcome, reconcile::ReconcileError> {
        let result = reconcile::reconcile(&self.dataplane(families), desired);
        memory.forget_view();
        result
    }
}
