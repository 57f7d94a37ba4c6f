//! Policies several tests share.
//!
//! The mission policy is the tool's reason to exist: a pre-DNAT whitelist
//! that lets a few sources reach a NodePort and drops everyone else there,
//! before kube-proxy's DNAT. The shipped example of it is
//! `policies/nodeport-whitelist.yaml` (which `tests/golden.rs`,
//! `tests/packaging.rs` and `tests/properties.rs` read as it is); the kernel
//! tests use [`Whitelist`], the same policy with the [`Lab`](super::Lab)'s
//! addresses: the client's `.10` and `.12` are listed, `.11` and the routed
//! `203.0.113.x` sources (which the example's `203.0.113.0/28` would admit)
//! are not.

use std::fmt::Display;

use super::lab::ports;

/// The mission policy's name, which shows in its chains' comments, its NFLOG
/// prefixes (`DPI1|allow-cluster-nodeport-only`) and its `status` rows.
pub const MISSION_NAME: &str = "allow-cluster-nodeport-only";

/// The sources the mission policy whitelists in the lab: `CLIENT_V4[0]` and
/// `CLIENT_V4[2]`.
pub const MISSION_NETS: [&str; 2] = ["198.51.100.10/32", "198.51.100.12/32"];

/// The mission policy with the lab's addresses (Allow [`MISSION_NETS`], Deny
/// TCP [`ports::NODEPORT`], `selector: all()`).
pub fn mission_policy() -> String {
    Whitelist::mission().yaml()
}

/// A pre-DNAT NodePort whitelist in the shape of the mission policy: `order:
/// 10`, `preDNAT`, `applyOnForward`, one Allow rule for the listed source
/// nets, then a Deny of TCP to one port. The builder methods change the few
/// things tests vary; [`Whitelist::yaml`] writes the policy file.
#[derive(Debug, Clone)]
pub struct Whitelist {
    name: String,
    selector: String,
    nets: Vec<String>,
    before_deny: String,
    port: u16,
}

impl Whitelist {
    /// The mission policy: [`MISSION_NAME`], `selector: all()`,
    /// [`MISSION_NETS`], port [`ports::NODEPORT`].
    pub fn mission() -> Whitelist {
        Whitelist {
            name: MISSION_NAME.to_owned(),
            selector: "all()".to_owned(),
            nets: MISSION_NETS.iter().map(|net| (*net).to_owned()).collect(),
            before_deny: String::new(),
            port: ports::NODEPORT,
        }
    }

    /// Another `metadata.name`.
    pub fn name(mut self, name: &str) -> Whitelist {
        self.name = name.to_owned();
        self
    }

    /// Another host endpoint selector (`all()` by default).
    pub fn selector(mut self, selector: &str) -> Whitelist {
        self.selector = selector.to_owned();
        self
    }

    /// Other source nets for the Allow rule, written as they are (e.g.
    /// `198.51.100.11/32`).
    pub fn nets<T: Display>(mut self, nets: impl IntoIterator<Item = T>) -> Whitelist {
        self.nets = nets.into_iter().map(|net| net.to_string()).collect();
        self
    }

    /// Extra ingress rules (YAML list items indented by four spaces) between
    /// the Allow and the Deny rule.
    pub fn rules_before_deny(mut self, rules: &str) -> Whitelist {
        self.before_deny = rules.to_owned();
        self
    }

    /// Another port for the Deny rule.
    pub fn port(mut self, port: u16) -> Whitelist {
        self.port = port;
        self
    }

    /// The policy file.
    pub fn yaml(&self) -> String {
        format!(
            r#"apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata:
  name: {name}
spec:
  order: 10
  preDNAT: true
  applyOnForward: true
  selector: {selector}
  ingress:
    - action: Allow
      source:
        nets: [{nets}]
{before_deny}    - action: Deny
      protocol: TCP
      destination:
        ports: [{port}]
"#,
            name = self.name,
            selector = self.selector,
            nets = self.nets.join(", "),
            before_deny = self.before_deny,
            port = self.port,
        )
    }
}
