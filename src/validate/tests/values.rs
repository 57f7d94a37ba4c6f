//! The pure value checks, on their own.

use super::*;
use crate::model::{Action, Port, Protocol};
use crate::spec::{RawPort, RawProtocol};
use crate::validate::rules::parse_action;
use crate::validate::values::{parse_port, parse_protocol, parse_set_member, shown};

#[test]
fn pure_value_checks() {
    assert_eq!(parse_port(&RawPort::Number(443)), Ok(Port::Single(443)));
    assert_eq!(
        parse_port(&RawPort::Text("1:65535".into())),
        Ok(Port::Range(1, 65535))
    );
    assert!(parse_port(&RawPort::Text("1:65536".into())).is_err());
    assert!(parse_port(&RawPort::Text(":".into())).is_err());
    assert_eq!(
        parse_protocol(&RawProtocol::Name("SCTP".into())),
        Ok(Protocol::Sctp)
    );
    assert_eq!(
        parse_protocol(&RawProtocol::Number(132)),
        Ok(Protocol::Sctp)
    );
    assert_eq!(
        parse_cidr("10.0.0.0/8").map(|net| net.to_string()),
        Ok("10.0.0.0/8".to_owned())
    );
    assert_eq!(
        parse_cidr("10.0.0.1"),
        Err("`10.0.0.1` is an address, not a CIDR; write `10.0.0.1/32`".to_owned())
    );
    assert_eq!(
        parse_set_member("::1").map(|net| net.to_string()),
        Ok("::1/128".to_owned())
    );
    assert_eq!(parse_action("Pass"), Ok(Action::Pass));
    assert_eq!(shown(&"é".repeat(100)).chars().count(), 65);
    assert_eq!(shown("a\u{0}\u{85}"), "a\\u{0}\\u{85}");
}
