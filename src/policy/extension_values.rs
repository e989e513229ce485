//! `datetime("…")` and `decimal("…")` values for request contexts, built
//! without parsing the extension function's name on every call.
//!
//! cedar-policy 4.14.1's `RestrictedExpression::new_datetime` and
//! `new_decimal` build `call_extension_fn(Name::unqualified_name(
//! "datetime".parse()), [val(src)])`, parsing the name with Cedar's parser
//! each time (about 2.5 µs, more than the rest of a session context). Here
//! the name is parsed once per process and cloned, and the same expression
//! is handed to `RestrictedExpression` through its `From` conversion from
//! Cedar's core type (the pinned `cedar-policy-core`, the crate
//! `cedar-policy` itself builds on). The value is equal to what the public
//! constructors yield (tested below), so verdicts and recorded contexts do
//! not change. Should a name ever fail to parse, the public constructor is
//! used.

use std::sync::LazyLock;

use cedar_policy::RestrictedExpression;
use cedar_policy_core::ast::{Name, RestrictedExpr, UnreservedId};

static DATETIME: LazyLock<Option<Name>> = LazyLock::new(|| name("datetime"));
static DECIMAL: LazyLock<Option<Name>> = LazyLock::new(|| name("decimal"));

fn name(text: &str) -> Option<Name> {
    text.parse::<UnreservedId>()
        .ok()
        .map(Name::unqualified_name)
}

/// `datetime(src)`, as [`RestrictedExpression::new_datetime`] builds it.
pub fn datetime(src: &str) -> RestrictedExpression {
    match &*DATETIME {
        Some(name) => call(name, src),
        None => RestrictedExpression::new_datetime(src),
    }
}

/// `decimal(src)`, as [`RestrictedExpression::new_decimal`] builds it.
pub fn decimal(src: &str) -> RestrictedExpression {
    match &*DECIMAL {
        Some(name) => call(name, src),
        None => RestrictedExpression::new_decimal(src),
    }
}

fn call(name: &Name, src: &str) -> RestrictedExpression {
    RestrictedExpression::from(RestrictedExpr::call_extension_fn(
        name.clone(),
        [RestrictedExpr::val(src)],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cedar_policy::Context;

    #[test]
    fn the_values_equal_the_public_constructors() {
        for src in ["2026-11-22T08:00:00.000Z", "2026-01-01", "not a time", ""] {
            assert_eq!(datetime(src), RestrictedExpression::new_datetime(src));
        }
        for src in ["0.9000", "-12.5000", "1e3", ""] {
            assert_eq!(decimal(src), RestrictedExpression::new_decimal(src));
        }
        assert!(DATETIME.is_some() && DECIMAL.is_some());
    }

    #[test]
    fn contexts_built_either_way_are_identical() {
        let ours = Context::from_pairs([
            ("t".to_string(), datetime("2026-11-22T08:00:00.000Z")),
            ("d".to_string(), decimal("0.9000")),
        ])
        .unwrap();
        let theirs = Context::from_pairs([
            (
                "t".to_string(),
                RestrictedExpression::new_datetime("2026-11-22T08:00:00.000Z"),
            ),
            ("d".to_string(), RestrictedExpression::new_decimal("0.9000")),
        ])
        .unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"));
    }
}
