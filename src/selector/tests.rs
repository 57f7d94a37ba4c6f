//! Unit tests of the selector language: matching, printing, errors and their positions.

use super::*;

fn label_map(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|&(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

fn parse_ok(text: &str) -> Selector {
    Selector::parse(text).unwrap_or_else(|error| panic!("`{text}` failed: {error:?}"))
}

/// The canonical form parses back to an equal selector and prints identically.
fn assert_round_trip(selector: &Selector) {
    let printed = selector.to_string();
    let reparsed = Selector::parse(&printed)
        .unwrap_or_else(|error| panic!("canonical `{printed}` failed: {error:?}"));
    assert_eq!(&reparsed, selector, "round trip of `{printed}`");
    assert_eq!(reparsed.to_string(), printed, "printing `{printed}` again");
}

/// The error span lies inside the text, on character boundaries.
fn assert_valid_span(text: &str, error: &SelectorError) {
    assert!(
        error.offset + error.len <= text.len(),
        "{error:?} in {text:?}"
    );
    assert!(text.is_char_boundary(error.offset), "{error:?} in {text:?}");
    assert!(text.is_char_boundary(error.offset + error.len), "{error:?}");
    assert!(!error.message.ends_with('.'), "{error:?}");
    assert!(!error.message.contains('\n'), "{error:?}");
}

/// Parses `selector`, matches it against `labels`, and checks that it round-trips, so
/// that every matching case is a printing case too.
fn check(selector: &str, labels: &[(&str, &str)], expected: bool) {
    let parsed = parse_ok(selector);
    assert_eq!(
        parsed.matches(&label_map(labels)),
        expected,
        "`{selector}` (parsed as `{parsed}`) on {labels:?}"
    );
    assert_round_trip(&parsed);
}

fn parse_error(text: &str) -> SelectorError {
    match Selector::parse(text) {
        Ok(parsed) => panic!("`{text}` parsed as `{parsed}`, expected an error"),
        Err(error) => {
            assert_valid_span(text, &error);
            error
        }
    }
}

/// Labels as written in a test table.
type Labels = &'static [(&'static str, &'static str)];

/// A selector, the labels it is matched against, and whether it should match.
type MatchCase = (&'static str, Labels, bool);

const WEB: &[(&str, &str)] = &[("role", "web"), ("env", "prod")];
const DB: &[(&str, &str)] = &[("role", "db"), ("env", "prod")];
const EMPTY_ROLE: &[(&str, &str)] = &[("role", "")];
const NONE: &[(&str, &str)] = &[];

#[test]
fn operators() {
    let cases: &[MatchCase] = &[
        ("", NONE, true),
        ("   ", WEB, true),
        ("all()", NONE, true),
        ("all( )", WEB, true),
        ("global()", NONE, true),
        ("has(role)", WEB, true),
        ("has(role)", NONE, false),
        ("has(role)", EMPTY_ROLE, true),
        ("has( role )", WEB, true),
        ("has(Role)", WEB, false),
        ("role == 'web'", WEB, true),
        ("role == 'db'", WEB, false),
        ("role == 'web'", NONE, false),
        ("role == 'Web'", WEB, false),
        ("Role == 'web'", WEB, false),
        ("role == ''", EMPTY_ROLE, true),
        ("role == ''", NONE, false),
        ("role != 'web'", WEB, false),
        ("role != 'db'", WEB, true),
        ("role != 'web'", NONE, true),
        ("role != ''", EMPTY_ROLE, false),
        ("role in {'web', 'db'}", WEB, true),
        ("role in {'db'}", WEB, false),
        ("role in {'web'}", NONE, false),
        ("role in {}", WEB, false),
        ("role in {}", NONE, false),
        ("role in {''}", EMPTY_ROLE, true),
        ("role not in {'web'}", WEB, false),
        ("role not in {'db', 'cache'}", WEB, true),
        ("role not in {'web'}", NONE, true),
        ("role not in {}", WEB, true),
        ("role not in {}", NONE, true),
        ("role contains 'e'", WEB, true),
        ("role contains 'web'", WEB, true),
        ("role contains 'x'", WEB, false),
        ("role contains ''", WEB, true),
        ("role contains ''", EMPTY_ROLE, true),
        ("role contains ''", NONE, false),
        ("role starts with 'we'", WEB, true),
        ("role starts with 'eb'", WEB, false),
        ("role starts with ''", WEB, true),
        ("role starts with ''", NONE, false),
        ("role ends with 'eb'", WEB, true),
        ("role ends with 'we'", WEB, false),
        ("role ends with 'b'", NONE, false),
    ];
    for &(selector, labels, expected) in cases {
        check(selector, labels, expected);
    }
}

#[test]
fn glued_and_spaced_operators() {
    let cases: &[MatchCase] = &[
        ("role=='web'", WEB, true),
        ("role!='web'", WEB, false),
        ("role notin {'db'}", WEB, true),
        ("role notin{'web'}", WEB, false),
        ("role not  in {'web'}", WEB, false),
        ("role not\tin {'db'}", WEB, true),
        ("role startswith 'w'", WEB, true),
        ("role starts\twith 'w'", WEB, true),
        ("role endswith 'b'", WEB, true),
        ("role ends   with 'x'", WEB, false),
        ("role in{'web'}", WEB, true),
        ("role contains'e'", WEB, true),
        ("role in {'web',}", WEB, true),
        ("role in { 'db' , 'web' , }", WEB, true),
    ];
    for &(selector, labels, expected) in cases {
        check(selector, labels, expected);
    }
}

#[test]
fn keywords_as_label_names() {
    let cases: &[MatchCase] = &[
        ("in == 'x'", &[("in", "x")], true),
        ("in in {'x'}", &[("in", "x")], true),
        ("all == 'x'", &[("all", "x")], true),
        ("has == 'x'", &[("has", "x")], true),
        ("has(has)", &[("has", "")], true),
        ("global != 'x'", &[("global", "x")], false),
        ("contains contains 'x'", &[("contains", "axb")], true),
        ("not in {'x'}", &[("not", "x")], true),
        ("not not in {'x'}", &[("not", "y")], true),
        ("starts starts with 's'", &[("starts", "sx")], true),
        ("with == 'w'", &[("with", "w")], true),
        ("hasx == 'y'", &[("hasx", "y")], true),
        ("-a == 'x'", &[("-a", "x")], true),
        ("/a == 'x'", &[("/a", "x")], true),
        ("1a/b.c_d-e == 'x'", &[("1a/b.c_d-e", "x")], true),
        (
            "app.kubernetes.io/name in {'nginx'}",
            &[("app.kubernetes.io/name", "nginx")],
            true,
        ),
    ];
    for &(selector, labels, expected) in cases {
        check(selector, labels, expected);
    }
}

#[test]
fn precedence() {
    let cases: &[MatchCase] = &[
        // `!` applies to one comparison, not to what follows it.
        ("!role == 'web'", WEB, false),
        ("!role == 'web'", DB, true),
        ("!role == 'web' && env == 'prod'", DB, true),
        ("!role == 'web' && env == 'dev'", DB, false),
        ("!role == 'web' || env == 'prod'", WEB, true),
        // `&&` binds tighter than `||`.
        ("role == 'web' || role == 'db' && env == 'dev'", WEB, true),
        (
            "(role == 'web' || role == 'db') && env == 'dev'",
            WEB,
            false,
        ),
        ("has(c) || has(a) && has(b)", &[("c", "")], true),
        ("has(a) && has(b) || has(c)", &[("c", "")], true),
        ("has(a) && (has(b) || has(c))", &[("c", "")], false),
        ("!has(a) || has(b)", NONE, true),
        ("!(has(a) || has(b))", &[("b", "")], false),
        ("!(role == 'web' || role == 'db')", DB, false),
        ("!(role == 'web' || role == 'db')", EMPTY_ROLE, true),
        // Any number of `!`, folded by parity.
        ("!!has(role)", WEB, true),
        ("!!!has(role)", WEB, false),
        ("! ! has(role)", WEB, true),
        ("!(!has(role))", WEB, true),
        ("!(!(!has(role)))", NONE, true),
        ("((((has(role)))))", WEB, true),
        ("!all()", WEB, false),
        ("!global()", WEB, false),
        ("global() && has(role)", WEB, true),
        ("all() && role == 'db'", WEB, false),
        ("has(a) && has(b) && has(c)", &[("a", ""), ("b", "")], false),
        ("has(a) || has(b) || has(c)", &[("c", "")], true),
    ];
    for &(selector, labels, expected) in cases {
        check(selector, labels, expected);
    }
}

#[test]
fn quoting_and_whitespace() {
    let cases: &[MatchCase] = &[
        ("v == \"x\"", &[("v", "x")], true),
        ("v == \"it's\"", &[("v", "it's")], true),
        ("v == 'say \"hi\"'", &[("v", "say \"hi\"")], true),
        ("v == \"\"", &[("v", "")], true),
        ("v == 'a\nb'", &[("v", "a\nb")], true),
        ("v == 'a\r\nb'", &[("v", "a\r\nb")], true),
        ("v == 'a\tb'", &[("v", "a\tb")], true),
        ("v == 'a && b || (c)'", &[("v", "a && b || (c)")], true),
        ("v == '\\n'", &[("v", "\\n")], true),
        ("v == 'grüße'", &[("v", "grüße")], true),
        ("v in {\"a'b\", 'c\"d'}", &[("v", "c\"d")], true),
        ("v in {'a', \"b\"}", &[("v", "b")], true),
        ("\tv\t==\t'x'\t", &[("v", "x")], true),
        ("  has(v)  ", &[("v", "x")], true),
        ("has(\tv\t)", &[("v", "x")], true),
        ("(  has(v)  )", &[("v", "x")], true),
    ];
    for &(selector, labels, expected) in cases {
        check(selector, labels, expected);
    }
}

#[test]
fn canonical_form() {
    let cases = [
        ("", "all()"),
        (" \t ", "all()"),
        ("all(  )", "all()"),
        ("global( )", "global()"),
        ("has( a )", "has(a)"),
        ("a=='x'", r#"a == "x""#),
        ("a != 'x'", r#"a != "x""#),
        ("a contains 'x'", r#"a contains "x""#),
        ("a startswith 'x'", r#"a starts with "x""#),
        ("a ends  with'x'", r#"a ends with "x""#),
        ("a notin {'b','a','b'}", r#"a not in {"a", "b"}"#),
        ("a in {'x',}", r#"a in {"x"}"#),
        ("a in {}", "a in {}"),
        ("a in { }", "a in {}"),
        ("a == ''", r#"a == """#),
        ("a == 'say \"hi\"'", r#"a == 'say "hi"'"#),
        ("a == \"it's\"", r#"a == "it's""#),
        ("a in {'x\"y', \"it's\"}", r#"a in {"it's", 'x"y'}"#),
        ("a == 'b' && c == 'd'", r#"(a == "b" && c == "d")"#),
        (
            "a == 'b' || c == 'd' && e == 'f'",
            r#"(a == "b" || (c == "d" && e == "f"))"#,
        ),
        (
            "(a == 'b' || c == 'd') && e == 'f'",
            r#"((a == "b" || c == "d") && e == "f")"#,
        ),
        ("((has(a)))", "has(a)"),
        ("!has(a)", "!has(a)"),
        ("! ! has(a)", "has(a)"),
        ("!!!has(a)", "!has(a)"),
        ("!(!has(a))", "has(a)"),
        ("!(has(a) && has(b))", "!(has(a) && has(b))"),
        ("!a == 'x'", r#"!a == "x""#),
        ("!(a == 'x')", r#"!a == "x""#),
        ("has(a)&&has(b)&&has(c)", "(has(a) && has(b) && has(c))"),
        (
            "(has(a) && has(b)) && has(c)",
            "((has(a) && has(b)) && has(c))",
        ),
        ("in == 'x' || all()", r#"(in == "x" || all())"#),
    ];
    for (input, canonical) in cases {
        let parsed = parse_ok(input);
        assert_eq!(parsed.to_string(), canonical, "canonical form of `{input}`");
        assert_round_trip(&parsed);
    }
}

#[test]
fn equality_ignores_spelling() {
    let same = [
        ("a in {'y', 'x', 'x'}", "a in {\"x\", \"y\"}"),
        ("!!has(a)", "has(a)"),
        ("((a == 'x'))", "a == \"x\""),
        ("", "all()"),
        ("a notin {}", "a not in { }"),
    ];
    for (left, right) in same {
        assert_eq!(parse_ok(left), parse_ok(right), "`{left}` vs `{right}`");
    }
    assert_ne!(parse_ok("a == 'x'"), parse_ok("a != 'x'"));
    assert_ne!(parse_ok("has(a)"), parse_ok("has(b)"));
}

#[test]
fn api_helpers() {
    for text in ["", "  ", "all()", " all( ) ", "((all()))", "!!all()"] {
        assert!(parse_ok(text).is_all(), "`{text}`");
    }
    for text in ["global()", "!all()", "has(a)", "all() && all()"] {
        assert!(!parse_ok(text).is_all(), "`{text}`");
    }
    assert_eq!(Selector::all(), parse_ok(""));
    assert_eq!(Selector::default(), Selector::all());
    assert_eq!(Selector::all().to_string(), "all()");
    assert_eq!("has(a)".parse::<Selector>(), Selector::parse("has(a)"));

    let keys = parse_ok("has(a) && b == 'x' || !(c in {'y'}) && all() || has(a)");
    assert_eq!(keys.label_keys(), BTreeSet::from(["a", "b", "c"]));
    assert!(parse_ok("all() || global()").label_keys().is_empty());

    let error = parse_error("a = 'x'");
    assert_eq!(
        error.to_string(),
        "byte 2: expected `==` after `a`, found `=`"
    );
    assert_eq!(error.span(), 2..3);
}

#[test]
#[expect(clippy::too_many_lines, reason = "one table of cases, one loop")]
fn errors() {
    let long_label = "k".repeat(MAX_LABEL_LEN + 1);
    let longest_label = format!("{} == 'x'", "k".repeat(MAX_LABEL_LEN));
    assert!(Selector::parse(&longest_label).is_ok());
    let long_key = format!("{long_label} == 'x'");
    let long_has = format!("has({long_label})");
    let cases: &[(&str, usize, &str)] = &[
        ("a = 'x'", 2, "expected `==` after `a`, found `=`"),
        ("a =", 2, "expected `==` after `a`, found `=`"),
        ("= 'x'", 0, "expected `==`, found `=`"),
        ("a == 'x' & b == 'y'", 9, "expected `&&`, found `&`"),
        ("a == 'x' | b == 'y'", 9, "expected `||`, found `|`"),
        ("a == x", 5, "expected a quoted value after `==`, found `x`"),
        (
            "a != x-1.2",
            5,
            "expected a quoted value after `!=`, found `x-1.2`",
        ),
        (
            "a contains *x",
            11,
            "expected a quoted value after `contains`, found `*x`",
        ),
        (
            "a == ",
            5,
            "expected a quoted value after `==`, found end of input",
        ),
        ("a == (", 5, "expected a quoted value after `==`, found `(`"),
        ("a in 'x'", 5, "expected `{` after `in`, found `'x'`"),
        ("a not in x", 9, "expected `{` after `not in`, found `x`"),
        ("a in", 4, "expected `{` after `in`, found end of input"),
        (
            "a in {'x' 'y'}",
            10,
            "expected `,` or `}` in set, found `'y'`",
        ),
        (
            "a in {'x'",
            9,
            "expected `,` or `}` in set, found end of input",
        ),
        ("a in {'x')", 9, "expected `,` or `}` in set, found `)`"),
        (
            "a in {x}",
            6,
            "expected a quoted value or `}` in set, found `x`",
        ),
        (
            "a in {,}",
            6,
            "expected a quoted value or `}` in set, found `,`",
        ),
        (
            "a in {'x',,}",
            10,
            "expected a quoted value or `}` in set, found `,`",
        ),
        (
            "a in {",
            6,
            "expected a quoted value or `}` in set, found end of input",
        ),
        ("a == 'x", 5, "unterminated string: no closing `'`"),
        ("a == \"x'", 5, "unterminated string: no closing `\"`"),
        ("a in {'x', 'y}", 11, "unterminated string"),
        ("'x", 0, "unterminated string"),
        (
            "has(a",
            5,
            "expected `)` to close `has(`, found end of input",
        ),
        ("has(a b)", 6, "expected `)` to close `has(`, found `b`"),
        ("has()", 4, "expected a label name after `has(`, found `)`"),
        (
            "has('a')",
            4,
            "expected a label name after `has(`, found `'a'`",
        ),
        (
            "has(",
            4,
            "expected a label name after `has(`, found end of input",
        ),
        ("has (a)", 3, "unexpected space between `has` and `(`"),
        ("all\t()", 3, "unexpected space between `all` and `(`"),
        ("global ()", 6, "unexpected space between `global` and `(`"),
        ("all(x)", 4, "expected `)` after `all(`, found `x`"),
        (
            "global(",
            7,
            "expected `)` after `global(`, found end of input",
        ),
        (
            "(a == 'x'",
            9,
            "expected `)` to close `(`, found end of input",
        ),
        (
            "((has(a))",
            9,
            "expected `)` to close `(`, found end of input",
        ),
        ("(a == 'x' b", 10, "expected `)`, `&&` or `||`, found `b`"),
        ("a == 'x')", 8, "unmatched `)`"),
        ("()", 0, "empty parentheses"),
        ("has(a) && ( )", 10, "empty parentheses"),
        (
            "a",
            1,
            "expected operator after label `a`, found end of input",
        ),
        ("a b", 2, "expected operator after label `a`, found `b`"),
        (
            "a && b == 'x'",
            2,
            "expected operator after label `a`, found `&&`",
        ),
        (
            "a is 'x'",
            2,
            "expected operator after label `a`, found `is`",
        ),
        (
            "a in-x {}",
            2,
            "expected operator after label `a`, found `in-x`",
        ),
        ("a containsx 'y'", 2, "found `containsx`"),
        ("a IN {'x'}", 2, "found `IN`"),
        (
            "a ! = 'x'",
            2,
            "expected operator after label `a`, found `!`",
        ),
        ("a < 'x'", 2, "expected operator after label `a`, found `<`"),
        (
            "not has(a)",
            4,
            "expected operator after label `not`, found `has`",
        ),
        (
            "a starts 'x'",
            9,
            "expected `with` after `starts`, found `'x'`",
        ),
        (
            "a ends",
            6,
            "expected `with` after `ends`, found end of input",
        ),
        ("a not {'x'}", 6, "expected `in` after `not`, found `{`"),
        (
            "a not inside {'x'}",
            6,
            "expected `in` after `not`, found `inside`",
        ),
        ("'x' == a", 0, "expected an expression, found `'x'`"),
        ("== 'x'", 0, "expected an expression, found `==`"),
        (
            "a == 'x' &&",
            11,
            "expected an expression after `&&`, found end of input",
        ),
        (
            "a == 'x' ||  ",
            13,
            "expected an expression after `||`, found end of input",
        ),
        (
            "!",
            1,
            "expected an expression after `!`, found end of input",
        ),
        (
            "(",
            1,
            "expected an expression after `(`, found end of input",
        ),
        (
            "a == 'x' && {",
            12,
            "expected an expression after `&&`, found `{`",
        ),
        (
            "has(a) && && has(b)",
            10,
            "expected an expression after `&&`, found `&&`",
        ),
        (
            "a == 'x' b == 'y'",
            9,
            "expected `&&`, `||` or end of selector, found `b`",
        ),
        ("has(a) has(b)", 7, "found `has(b)`"),
        (
            "has(a) == 'x'",
            7,
            "expected `&&`, `||` or end of selector, found `==`",
        ),
        ("a == 'x' and b == 'y'", 9, "found `and`"),
        (
            "a == 'x' ,",
            9,
            "expected `&&`, `||` or end of selector, found `,`",
        ),
        ("a == 'x'\n&& b == 'y'", 8, "line break in selector"),
        ("a == 'x' \r\n", 9, "line break in selector"),
        ("\n", 0, "line break in selector"),
        ("a\n== 'x'", 1, "line break in selector"),
        ("a ==\n'x'", 4, "line break in selector"),
        ("has(\na)", 4, "line break in selector"),
        ("has(a\n)", 5, "line break in selector"),
        ("a not\nin {}", 5, "line break in selector"),
        ("a in {'x',\n'y'}", 10, "line break in selector"),
        ("a in {'x'\n}", 9, "line break in selector"),
        ("a == 'x' ; b", 9, "unexpected character `;`"),
        ("a == 'x' && é == 'y'", 12, "unexpected character `é`"),
        (
            "a == 'x' && \u{0} == 'y'",
            12,
            "unexpected character `\\u{0}`",
        ),
        ("\u{a0}has(a)", 0, "unexpected character"),
        (&long_key, 0, "label too long: 513 bytes, at most 512"),
        (&long_has, 4, "label too long"),
    ];
    for &(text, offset, message) in cases {
        let error = parse_error(text);
        assert!(
            error.message.contains(message),
            "`{text}`: message {:?} does not contain {message:?}",
            error.message
        );
        assert_eq!(
            error.offset, offset,
            "`{text}`: offset of {:?}",
            error.message
        );
    }
}

#[test]
fn error_lengths() {
    let cases = [
        ("a = 'x'", 1),
        ("a == x-1", 3),
        ("a == ", 0),
        ("a is 'x'", 2),
        ("has (a)", 1),
        ("a == 'x' b", 1),
        ("a == 'x' 'yy'", 4),
        ("()", 2),
        ("(a == 'x'", 0),
        ("a == 'x' ; b", 1),
        ("é", 2),
    ];
    for (text, len) in cases {
        assert_eq!(parse_error(text).len, len, "`{text}`");
    }
}

#[test]
fn error_help() {
    let cases = [
        (
            "role = 'web'",
            "selectors compare with `==`: `role == 'web'`",
        ),
        ("role = \"it's\"", "`role == \"it's\"`"),
        ("role = web", "`role == 'web'`"),
        ("role =", "`role == 'value'`"),
        ("role == web", "quote the value: `role == 'web'`"),
        (
            "role contains web",
            "quote the value: `role contains 'web'`",
        ),
        ("role ==", "write `role == 'value'`"),
        (
            "role in web",
            "list the values in braces: `role in {'web'}`",
        ),
        ("role not in 'web'", "`role not in {'web'}`"),
        ("role in (", "`role in {'a', 'b'}`"),
        ("role in {web}", "quote each value in a set: `'web'`"),
        ("has (role)", "remove the space: `has(role)`"),
        ("all  ( )", "remove the space: `all( )`"),
        ("global (", "remove the space between `global` and `(`"),
        ("role", "write `has(role)`"),
        (
            "role is 'x'",
            "`==`, `!=`, `in`, `not in`, `contains`, `starts with` or `ends with`",
        ),
        ("not has(role)", "negate with `!`"),
        (
            "role starts 'x'",
            "the operator is `starts with`: `role starts with 'x'`",
        ),
        ("role not {'x'}", "`role not in {'a', 'b'}`"),
        ("a == 'x'\n", "YAML folded scalar (`selector: >-`)"),
        ("(a == 'x'", "add the missing `)`"),
        ("a in {'x'", "close the set with `}`"),
        ("a in {'x' 'y'}", "separate set values with commas"),
        ("a == 'x' and b == 'y'", "write `&&` instead of `and`"),
        ("a == 'x' OR b == 'y'", "write `||` instead of `OR`"),
        (
            "a == 'x' b",
            "combine expressions with `&&` (and) or `||` (or)",
        ),
        ("a == 'x' | b", "combine expressions"),
        (
            "has('role')",
            "write the label name without quotes: `has(role)`",
        ),
        ("has()", "`has(role)`"),
        ("all(x)", "`all()` takes no arguments"),
        ("'web' == role", "the label comes first"),
        ("()", "`all()`"),
        ("a == 'x", "no escapes"),
        ("a == 'x' ; b", "values must be quoted"),
    ];
    let too_deep = "(".repeat(200);
    let cases = cases.into_iter().chain([(too_deep.as_str(), "simplify")]);
    for (text, help) in cases {
        let error = parse_error(text);
        let actual = error.help.unwrap_or_default();
        assert!(
            actual.contains(help),
            "`{text}`: help {actual:?} lacks {help:?}"
        );
    }
}

#[test]
fn nesting_is_bounded() {
    let at_limit = [
        format!("{}has(a){}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH)),
        format!("{}has(a)", "!".repeat(MAX_DEPTH)),
        format!(
            "{}has(a){}",
            "!(".repeat(MAX_DEPTH / 2),
            ")".repeat(MAX_DEPTH / 2)
        ),
    ];
    for text in &at_limit {
        let parsed = parse_ok(text);
        assert!(parsed.matches(&label_map(&[("a", "")])));
        assert_round_trip(&parsed);
    }
    let too_deep = [
        "(".repeat(10_000),
        format!("{}has(a){}", "(".repeat(10_000), ")".repeat(10_000)),
        format!("{}has(a)", "!".repeat(10_000)),
        format!("{}has(a)", "!(".repeat(10_000)),
        format!("{}has(a)", "! ".repeat(MAX_DEPTH + 1)),
    ];
    for text in &too_deep {
        let error = parse_error(text);
        assert!(error.message.contains("nested too deeply"), "{error:?}");
        assert!(error.offset <= 2 * MAX_DEPTH, "{error:?}");
    }
    assert_eq!(parse_error(&"(".repeat(10_000)).offset, MAX_DEPTH);
    assert_eq!(parse_error(&"!".repeat(10_000)).offset, MAX_DEPTH);
}

#[test]
fn long_input_does_not_recurse() {
    // Chains of `&&` and `||` are flat, so their length is not nesting.
    let chain = format!("{}has(a)", "has(a) && has(b) || ".repeat(20_000));
    let parsed = parse_ok(&chain);
    assert!(parsed.matches(&label_map(&[("a", "")])));
    assert_round_trip(&parsed);
    // Lexing never recurses either, even while describing an error.
    let error = parse_error(&"has(".repeat(50_000));
    assert_eq!(error.offset, 7, "{error:?}");
    let big_set = format!("a in {{{}}}", "'x', ".repeat(50_000));
    assert!(parse_ok(&big_set).matches(&label_map(&[("a", "x")])));
}

/// A small deterministic generator (xorshift), so the tests need no crates.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        // The bound is small, so the modulo bias is irrelevant here.
        usize::try_from(self.0 % u64::try_from(bound).unwrap_or(u64::MAX)).unwrap_or(0)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn blank(&mut self) -> &'static str {
        self.pick(&["", "", " ", "  ", "\t"])
    }

    fn some_blank(&mut self) -> &'static str {
        self.pick(&[" ", " ", "  ", "\t", " \t"])
    }
}

const KEYS: &[&str] = &["a", "b", "in", "all", "has", "not", "x.io/y-1"];
const VALUES: &[&str] = &["", "x", "y", "xy", "it's", "say \"hi\"", "a b", "l\nm"];

/// `value` as a string literal, in either quote style when both can hold it.
fn quote(rng: &mut Rng, value: &str) -> String {
    if value.contains('\'') || (!value.contains('"') && rng.below(2) == 0) {
        format!("\"{value}\"")
    } else {
        format!("'{value}'")
    }
}

/// A random selector written with the grammar's precedence, and whether it matches
/// `labels` computed independently of the parser.
fn generate_or(rng: &mut Rng, labels: &BTreeMap<String, String>, depth: usize) -> (String, bool) {
    let (mut text, mut result) = generate_and(rng, labels, depth);
    for _ in 0..rng.below(3) {
        let (next, value) = generate_and(rng, labels, depth);
        text = format!("{text}{}||{}{next}", rng.blank(), rng.blank());
        result = result || value;
    }
    (text, result)
}

fn generate_and(rng: &mut Rng, labels: &BTreeMap<String, String>, depth: usize) -> (String, bool) {
    let (mut text, mut result) = generate_unary(rng, labels, depth);
    for _ in 0..rng.below(3) {
        let (next, value) = generate_unary(rng, labels, depth);
        text = format!("{text}{}&&{}{next}", rng.blank(), rng.blank());
        result = result && value;
    }
    (text, result)
}

fn generate_unary(
    rng: &mut Rng,
    labels: &BTreeMap<String, String>,
    depth: usize,
) -> (String, bool) {
    let mut text = String::new();
    let mut negate = false;
    for _ in 0..rng.below(4).saturating_sub(1) {
        text.push('!');
        text.push_str(rng.blank());
        negate = !negate;
    }
    let (primary, value) = generate_primary(rng, labels, depth);
    (text + &primary, value != negate)
}

fn generate_primary(
    rng: &mut Rng,
    labels: &BTreeMap<String, String>,
    depth: usize,
) -> (String, bool) {
    let key = rng.pick(KEYS);
    let actual = labels.get(key).map(String::as_str);
    let choices = if depth == 0 { 5 } else { 6 };
    match rng.below(choices) {
        0 => {
            let (open, close) = (rng.blank(), rng.blank());
            (format!("has({open}{key}{close})"), actual.is_some())
        }
        1 => {
            let inner = rng.blank();
            let call = rng.pick(&["all", "global"]);
            (format!("{call}({inner})"), true)
        }
        2 | 3 => {
            let wanted = rng.pick(VALUES);
            let (operator, result) = match rng.below(8) {
                0 => ("==", actual == Some(wanted)),
                1 => ("!=", actual != Some(wanted)),
                2 => ("contains", actual.is_some_and(|v| v.contains(wanted))),
                3 => ("starts with", actual.is_some_and(|v| v.starts_with(wanted))),
                4 => ("startswith", actual.is_some_and(|v| v.starts_with(wanted))),
                5 => ("ends with", actual.is_some_and(|v| v.ends_with(wanted))),
                6 => ("ends\twith", actual.is_some_and(|v| v.ends_with(wanted))),
                _ => ("endswith", actual.is_some_and(|v| v.ends_with(wanted))),
            };
            let before = if operator.starts_with(['=', '!']) {
                rng.blank()
            } else {
                rng.some_blank()
            };
            let value = quote(rng, wanted);
            (
                format!("{key}{before}{operator}{}{value}", rng.blank()),
                result,
            )
        }
        4 => {
            let mut set = Vec::new();
            let mut members = Vec::new();
            for _ in 0..rng.below(4) {
                let value = rng.pick(VALUES);
                members.push(value);
                set.push(format!(
                    "{}{}{}",
                    rng.blank(),
                    quote(rng, value),
                    rng.blank()
                ));
            }
            let trailing = if !set.is_empty() && rng.below(2) == 0 {
                ","
            } else {
                ""
            };
            let inside = actual.is_some_and(|v| members.contains(&v));
            let (operator, result) = match rng.below(3) {
                0 => ("in", inside),
                1 => ("not in", !inside),
                _ => ("notin", !inside),
            };
            let text = format!(
                "{key}{}{operator}{}{{{}{trailing}{}}}",
                rng.some_blank(),
                rng.blank(),
                set.join(","),
                rng.blank()
            );
            (text, result)
        }
        _ => {
            let (inner, value) = generate_or(rng, labels, depth - 1);
            (format!("({}{inner}{})", rng.blank(), rng.blank()), value)
        }
    }
}

fn random_labels(rng: &mut Rng) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for key in KEYS {
        if rng.below(3) > 0 {
            labels.insert(key.to_string(), rng.pick(VALUES).to_owned());
        }
    }
    labels
}

#[test]
fn generated_selectors_match_and_round_trip() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3_000 {
        let labels = random_labels(&mut rng);
        let (text, expected) = generate_or(&mut rng, &labels, 3);
        let parsed = parse_ok(&text);
        assert_eq!(parsed.matches(&labels), expected, "`{text}` on {labels:?}");
        assert_round_trip(&parsed);
        let reparsed = parse_ok(&parsed.to_string());
        for _ in 0..4 {
            let other = random_labels(&mut rng);
            assert_eq!(parsed.matches(&other), reparsed.matches(&other), "`{text}`");
        }
    }
}

#[test]
fn garbage_never_panics() {
    let pieces = [
        "a", "b", "in", "not", "has(", "all(", "global(", "(", ")", "{", "}", ",", "=", "==", "!",
        "!=", "&", "&&", "|", "||", "'", "\"", "'x'", " ", "\t", "\n", "é", "contains", "starts",
        "with", "-", ";",
    ];
    let mut rng = Rng(12345);
    for _ in 0..20_000 {
        let text: String = (0..rng.below(12)).map(|_| rng.pick(&pieces)).collect();
        match Selector::parse(&text) {
            Ok(parsed) => assert_round_trip(&parsed),
            Err(error) => assert_valid_span(&text, &error),
        }
    }
}
