//! The AuthZEN request bodies as JSON: which members are required and of
//! which JSON type, the defaults a batch's top level gives its
//! evaluations, its options, a search's page, and the bounds on what one
//! request may carry. No Cedar here: what a well-shaped request means for an
//! application is `crate::policy::application`'s.
//!
//! Unknown members are ignored at every level, as the specification asks;
//! a member given as `null` is treated as absent.

use serde_json::{Map, Value};

use crate::policy::application::{ActionInput, EntityInput, RequestInput};

/// What one request may carry (`[pdp]`).
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Most evaluations in one batch.
    pub max_evaluations: usize,
    /// Largest `properties` or `context` object, in bytes of JSON.
    pub max_object_bytes: usize,
    /// Longest `type`, `id` or `name`, in bytes.
    pub max_name_bytes: usize,
    /// A search page's size when `page.limit` is not given.
    pub search_page: usize,
    /// Largest `page.limit`.
    pub max_search_page: usize,
}

impl Bounds {
    /// The bounds of `config`.
    pub fn of(config: &crate::config::PdpConfig) -> Bounds {
        Bounds {
            max_evaluations: config.max_evaluations,
            max_object_bytes: config.max_object_bytes,
            max_name_bytes: config.max_name_bytes,
            search_page: config.search_page.clamp(1, config.max_search_page.max(1)),
            max_search_page: config.max_search_page.max(1),
        }
    }
}

/// `options.evaluations_semantic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Semantic {
    /// Every evaluation, every answer (the default).
    ExecuteAll,
    /// In order, up to and including the first deny.
    DenyOnFirstDeny,
    /// In order, up to and including the first permit.
    PermitOnFirstPermit,
}

impl Semantic {
    /// Whether a batch stops after an evaluation decided `allowed`.
    pub fn stops_after(self, allowed: bool) -> bool {
        match self {
            Semantic::ExecuteAll => false,
            Semantic::DenyOnFirstDeny => !allowed,
            Semantic::PermitOnFirstPermit => allowed,
        }
    }
}

/// One evaluation of a batch, its defaults applied, or why it is not one
/// (a member missing or of the wrong JSON type): an error of that
/// evaluation alone.
pub type Item<'a> = Result<RequestInput<'a>, ShapeError>;

/// An `evaluations` request, its defaults applied.
#[derive(Debug, Clone)]
pub struct Batch<'a> {
    /// The evaluations, in request order.
    pub evaluations: Vec<Item<'a>>,
    /// How they are run.
    pub semantic: Semantic,
    /// `evaluations` was absent or empty: one evaluation of the top level.
    pub single: bool,
}

/// A request body that does not have the shape the API requires (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// The body is not a JSON object.
    #[error("the request body must be a JSON object")]
    Body,
    /// A required member is missing.
    #[error("`{0}` is required")]
    Missing(String),
    /// A member that must be an object is not.
    #[error("`{0}` must be a JSON object")]
    NotObject(String),
    /// A member that must be a string is not.
    #[error("`{0}` must be a string")]
    NotString(String),
    /// `evaluations` is not an array.
    #[error("`{0}` must be an array")]
    NotArray(String),
    /// A `type`, `id` or `name` over `max_name_bytes`.
    #[error("`{field}` is longer than {max} bytes")]
    TooLong {
        /// Where.
        field: String,
        /// The bound.
        max: usize,
    },
    /// A `properties` or `context` object over `max_object_bytes`.
    #[error("`{field}` is larger than {max} bytes of JSON")]
    TooLarge {
        /// Where.
        field: String,
        /// The bound.
        max: usize,
    },
    /// More evaluations than `max_evaluations`.
    #[error("`evaluations` holds {count} evaluations; at most {max} are decided in one request")]
    TooMany {
        /// How many were sent.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A `page.limit` that is not an integer from 1 to `max_search_page`.
    #[error("`page.limit` must be an integer from 1 to {0}")]
    PageLimit(usize),
    /// An `evaluations_semantic` the specification does not define.
    #[error(
        "`options.evaluations_semantic` must be `execute_all`, `deny_on_first_deny` or `permit_on_first_permit`"
    )]
    Semantic,
}

impl ShapeError {
    /// Whether it is a bound of what one request may carry: refused for
    /// the whole request even when one evaluation of a batch exceeds it.
    pub fn is_bound(&self) -> bool {
        matches!(
            self,
            ShapeError::TooLong { .. } | ShapeError::TooLarge { .. } | ShapeError::TooMany { .. }
        )
    }
}

/// Which of the three searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchKind {
    /// `search/subject`: the subjects of a type.
    Subject,
    /// `search/resource`: the resources of a type.
    Resource,
    /// `search/action`: the actions.
    Action,
}

impl SearchKind {
    /// Its name in paths and records.
    pub fn name(self) -> &'static str {
        match self {
            SearchKind::Subject => "subject",
            SearchKind::Resource => "resource",
            SearchKind::Action => "action",
        }
    }
}

/// A search request: the evaluation each candidate is decided as (the
/// searched entity's id, or the action's name, left empty), and the page
/// asked for.
#[derive(Debug, Clone)]
pub struct Search<'a> {
    /// Which search.
    pub kind: SearchKind,
    /// The evaluation of a candidate, but for the searched member.
    pub template: RequestInput<'a>,
    /// `page.token` (an empty one counts as absent).
    pub token: Option<&'a str>,
    /// `page.limit`, or the default page size.
    pub limit: usize,
    /// Whether `page.limit` was given.
    pub limit_given: bool,
}

/// A search request of `kind`: the searched entity needs only a `type` (an
/// `id` is ignored), the others are required in full; an action search
/// ignores any `action`.
pub fn search<'a>(
    body: &'a Value,
    kind: SearchKind,
    bounds: &Bounds,
) -> Result<Search<'a>, ShapeError> {
    let top = body.as_object().ok_or(ShapeError::Body)?;
    let required = |key: &str| present(top, key).ok_or_else(|| ShapeError::Missing(key.into()));
    let subject = match kind {
        SearchKind::Subject => searched(required("subject")?, "subject", bounds)?,
        _ => entity(required("subject")?, "subject", bounds)?,
    };
    let resource = match kind {
        SearchKind::Resource => searched(required("resource")?, "resource", bounds)?,
        _ => entity(required("resource")?, "resource", bounds)?,
    };
    let action = match kind {
        SearchKind::Action => ActionInput {
            name: "",
            properties: None,
        },
        _ => action(required("action")?, "action", bounds)?,
    };
    let (token, given) = page(top, bounds)?;
    Ok(Search {
        kind,
        template: RequestInput {
            subject,
            action,
            resource,
            context: object_member(top, "context", "context", bounds)?,
            at: String::new(),
        },
        token,
        limit: given.unwrap_or(bounds.search_page),
        limit_given: given.is_some(),
    })
}

/// The searched entity: `{type, properties?}`, its id left empty.
fn searched<'a>(v: &'a Value, field: &str, bounds: &Bounds) -> Result<EntityInput<'a>, ShapeError> {
    let obj = v
        .as_object()
        .ok_or_else(|| ShapeError::NotObject(field.into()))?;
    Ok(EntityInput {
        type_name: name(obj, "type", field, bounds)?,
        id: "",
        properties: object_member(obj, "properties", &format!("{field}.properties"), bounds)?,
    })
}

/// `page.token` and `page.limit`, as given.
fn page<'a>(
    top: &'a Map<String, Value>,
    bounds: &Bounds,
) -> Result<(Option<&'a str>, Option<usize>), ShapeError> {
    let Some(page) = present(top, "page") else {
        return Ok((None, None));
    };
    let page = page
        .as_object()
        .ok_or(ShapeError::NotObject("page".into()))?;
    let token = match present(page, "token") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .ok_or(ShapeError::NotString("page.token".into()))?,
        )
        .filter(|t| !t.is_empty()),
    };
    let limit = match present(page, "limit") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|n| (1..=bounds.max_search_page).contains(n))
                .ok_or(ShapeError::PageLimit(bounds.max_search_page))?,
        ),
    };
    Ok((token, limit))
}

/// The one evaluation of an `evaluation` request.
pub fn evaluation<'a>(body: &'a Value, bounds: &Bounds) -> Result<RequestInput<'a>, ShapeError> {
    let top = body.as_object().ok_or(ShapeError::Body)?;
    let defaults = Defaults::of(top, bounds)?;
    defaults.complete(no_members(), String::new(), bounds)
}

/// The evaluations of an `evaluations` request, each with the top level's
/// defaults for what it leaves out. An evaluation that lacks a member, or
/// gives one of the wrong JSON type, is an error of its own ([`Item`]);
/// the top level's shape and every bound are the whole request's.
pub fn evaluations<'a>(body: &'a Value, bounds: &Bounds) -> Result<Batch<'a>, ShapeError> {
    let top = body.as_object().ok_or(ShapeError::Body)?;
    let semantic = semantic(top)?;
    let listed = match present(top, "evaluations") {
        None => &[][..],
        Some(Value::Array(items)) => items.as_slice(),
        Some(_) => return Err(ShapeError::NotArray("evaluations".into())),
    };
    if listed.len() > bounds.max_evaluations {
        return Err(ShapeError::TooMany {
            count: listed.len(),
            max: bounds.max_evaluations,
        });
    }
    let defaults = Defaults::of(top, bounds)?;
    if listed.is_empty() {
        let one = defaults.complete(no_members(), String::new(), bounds)?;
        return Ok(Batch {
            evaluations: vec![Ok(one)],
            semantic,
            single: true,
        });
    }
    let mut evaluations = Vec::with_capacity(listed.len());
    for (i, item) in listed.iter().enumerate() {
        let at = format!("evaluations[{i}]");
        let one = match item.as_object() {
            Some(own) => defaults.complete(own, format!("{at}."), bounds),
            None => Err(ShapeError::NotObject(at)),
        };
        match one {
            Err(e) if e.is_bound() => return Err(e),
            one => evaluations.push(one),
        }
    }
    Ok(Batch {
        evaluations,
        semantic,
        single: false,
    })
}

/// The top level's members, each checked where given.
struct Defaults<'a> {
    subject: Option<EntityInput<'a>>,
    action: Option<ActionInput<'a>>,
    resource: Option<EntityInput<'a>>,
    context: Option<&'a Map<String, Value>>,
}

impl<'a> Defaults<'a> {
    fn of(top: &'a Map<String, Value>, bounds: &Bounds) -> Result<Defaults<'a>, ShapeError> {
        Ok(Defaults {
            subject: present(top, "subject")
                .map(|v| entity(v, "subject", bounds))
                .transpose()?,
            action: present(top, "action")
                .map(|v| action(v, "action", bounds))
                .transpose()?,
            resource: present(top, "resource")
                .map(|v| entity(v, "resource", bounds))
                .transpose()?,
            context: object_member(top, "context", "context", bounds)?,
        })
    }

    /// One evaluation: `own`'s members, else the defaults.
    fn complete(
        &self,
        own: &'a Map<String, Value>,
        at: String,
        bounds: &Bounds,
    ) -> Result<RequestInput<'a>, ShapeError> {
        let field = |name: &str| format!("{at}{name}");
        let subject = match present(own, "subject") {
            Some(v) => entity(v, &field("subject"), bounds)?,
            None => self
                .subject
                .ok_or_else(|| ShapeError::Missing(field("subject")))?,
        };
        let action = match present(own, "action") {
            Some(v) => action(v, &field("action"), bounds)?,
            None => self
                .action
                .ok_or_else(|| ShapeError::Missing(field("action")))?,
        };
        let resource = match present(own, "resource") {
            Some(v) => entity(v, &field("resource"), bounds)?,
            None => self
                .resource
                .ok_or_else(|| ShapeError::Missing(field("resource")))?,
        };
        let context = match present(own, "context") {
            Some(_) => object_member(own, "context", &field("context"), bounds)?,
            None => self.context,
        };
        Ok(RequestInput {
            subject,
            action,
            resource,
            context,
            at,
        })
    }
}

/// `options.evaluations_semantic` (default `execute_all`).
fn semantic(top: &Map<String, Value>) -> Result<Semantic, ShapeError> {
    let Some(options) = present(top, "options") else {
        return Ok(Semantic::ExecuteAll);
    };
    let options = options
        .as_object()
        .ok_or(ShapeError::NotObject("options".into()))?;
    match present(options, "evaluations_semantic") {
        None => Ok(Semantic::ExecuteAll),
        Some(v) => match v.as_str() {
            Some("execute_all") => Ok(Semantic::ExecuteAll),
            Some("deny_on_first_deny") => Ok(Semantic::DenyOnFirstDeny),
            Some("permit_on_first_permit") => Ok(Semantic::PermitOnFirstPermit),
            _ => Err(ShapeError::Semantic),
        },
    }
}

/// A subject or a resource: `{type, id, properties?}`.
fn entity<'a>(v: &'a Value, field: &str, bounds: &Bounds) -> Result<EntityInput<'a>, ShapeError> {
    let obj = v
        .as_object()
        .ok_or_else(|| ShapeError::NotObject(field.into()))?;
    Ok(EntityInput {
        type_name: name(obj, "type", field, bounds)?,
        id: name(obj, "id", field, bounds)?,
        properties: object_member(obj, "properties", &format!("{field}.properties"), bounds)?,
    })
}

/// An action: `{name, properties?}`.
fn action<'a>(v: &'a Value, field: &str, bounds: &Bounds) -> Result<ActionInput<'a>, ShapeError> {
    let obj = v
        .as_object()
        .ok_or_else(|| ShapeError::NotObject(field.into()))?;
    Ok(ActionInput {
        name: name(obj, "name", field, bounds)?,
        properties: object_member(obj, "properties", &format!("{field}.properties"), bounds)?,
    })
}

/// A required string member of at most `max_name_bytes`.
fn name<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    field: &str,
    bounds: &Bounds,
) -> Result<&'a str, ShapeError> {
    let at = format!("{field}.{key}");
    let text = present(obj, key)
        .ok_or_else(|| ShapeError::Missing(at.clone()))?
        .as_str()
        .ok_or_else(|| ShapeError::NotString(at.clone()))?;
    if text.len() > bounds.max_name_bytes {
        return Err(ShapeError::TooLong {
            field: at,
            max: bounds.max_name_bytes,
        });
    }
    Ok(text)
}

/// An optional object member of at most `max_object_bytes` of JSON.
fn object_member<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    field: &str,
    bounds: &Bounds,
) -> Result<Option<&'a Map<String, Value>>, ShapeError> {
    let Some(value) = present(obj, key) else {
        return Ok(None);
    };
    let map = value
        .as_object()
        .ok_or_else(|| ShapeError::NotObject(field.into()))?;
    if json_len(value) > bounds.max_object_bytes {
        return Err(ShapeError::TooLarge {
            field: field.into(),
            max: bounds.max_object_bytes,
        });
    }
    Ok(Some(map))
}

/// An object without members: what an evaluation of the top level alone
/// adds to the defaults.
fn no_members() -> &'static Map<String, Value> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    &EMPTY
}

/// A member, `null` counting as absent.
fn present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// The length of a value's compact JSON.
fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const BOUNDS: Bounds = Bounds {
        max_evaluations: 3,
        max_object_bytes: 64,
        max_name_bytes: 8,
        search_page: 2,
        max_search_page: 5,
    };

    fn alice() -> Value {
        json!({"type": "user", "id": "alice"})
    }

    #[test]
    fn an_evaluation_needs_its_three_members_typed() {
        let ok = json!({"subject": alice(), "action": {"name": "read"}, "resource": {"type": "record", "id": "r1"}, "foo": 1});
        let one = evaluation(&ok, &BOUNDS).unwrap();
        assert_eq!((one.subject.id, one.action.name), ("alice", "read"));
        for (body, error) in [
            (json!([]), ShapeError::Body),
            (
                json!({"action": {"name": "read"}, "resource": alice()}),
                ShapeError::Missing("subject".into()),
            ),
            (
                json!({"subject": alice(), "resource": alice()}),
                ShapeError::Missing("action".into()),
            ),
            (
                json!({"subject": alice(), "action": {"name": "read"}, "resource": null}),
                ShapeError::Missing("resource".into()),
            ),
            (
                json!({"subject": "alice", "action": {"name": "read"}, "resource": alice()}),
                ShapeError::NotObject("subject".into()),
            ),
            (
                json!({"subject": {"id": "alice"}, "action": {"name": "read"}, "resource": alice()}),
                ShapeError::Missing("subject.type".into()),
            ),
            (
                json!({"subject": alice(), "action": {}, "resource": alice()}),
                ShapeError::Missing("action.name".into()),
            ),
            (
                json!({"subject": alice(), "action": {"name": 123}, "resource": alice()}),
                ShapeError::NotString("action.name".into()),
            ),
            (
                json!({"subject": alice(), "action": {"name": "read"}, "resource": {"type": "r", "id": "123456789"}}),
                ShapeError::TooLong {
                    field: "resource.id".into(),
                    max: 8,
                },
            ),
            (
                json!({"subject": alice(), "action": {"name": "read"}, "resource": alice(), "context": []}),
                ShapeError::NotObject("context".into()),
            ),
            (
                json!({"subject": {"type": "user", "id": "a", "properties": {"x": "y".repeat(64)}}, "action": {"name": "read"}, "resource": alice()}),
                ShapeError::TooLarge {
                    field: "subject.properties".into(),
                    max: 64,
                },
            ),
        ] {
            assert_eq!(evaluation(&body, &BOUNDS).unwrap_err(), error, "{body}");
        }
    }

    #[test]
    fn a_batch_takes_its_defaults_from_the_top_level() {
        let body = json!({
            "subject": alice(), "action": {"name": "read"}, "context": {"time": "t"},
            "evaluations": [
                {"resource": {"type": "record", "id": "1"}},
                {"resource": {"type": "record", "id": "2"}, "action": {"name": "write"}, "context": {}},
            ],
        });
        let batch = evaluations(&body, &BOUNDS).unwrap();
        assert!(!batch.single);
        assert_eq!(batch.semantic, Semantic::ExecuteAll);
        let [Ok(first), Ok(second)] = batch.evaluations.as_slice() else {
            panic!("two evaluations");
        };
        assert_eq!((first.action.name, first.resource.id), ("read", "1"));
        assert!(first.context.is_some_and(|c| c.contains_key("time")));
        assert_eq!(
            (second.action.name, second.at.as_str()),
            ("write", "evaluations[1].")
        );
        assert!(second.context.is_some_and(|c| c.is_empty()));
        let missing = json!({"action": {"name": "read"}, "evaluations": [{"subject": alice(), "resource": alice()}, {"resource": alice()}, 7]});
        let batch = evaluations(&missing, &BOUNDS).unwrap();
        assert!(batch.evaluations[0].is_ok());
        assert_eq!(
            batch.evaluations[1].as_ref().unwrap_err(),
            &ShapeError::Missing("evaluations[1].subject".into())
        );
        assert_eq!(
            batch.evaluations[2].as_ref().unwrap_err(),
            &ShapeError::NotObject("evaluations[2]".into())
        );
        let long = json!({"action": {"name": "read"}, "evaluations": [{"subject": alice(), "resource": {"type": "r", "id": "123456789"}}]});
        assert!(evaluations(&long, &BOUNDS).unwrap_err().is_bound());
    }

    #[test]
    fn an_empty_batch_is_one_evaluation_and_a_long_one_is_refused() {
        for listed in [json!(null), json!([])] {
            let body = json!({"subject": alice(), "action": {"name": "read"}, "resource": alice(), "evaluations": listed});
            let batch = evaluations(&body, &BOUNDS).unwrap();
            assert!(batch.single && batch.evaluations.len() == 1);
        }
        let four = json!({"subject": alice(), "action": {"name": "read"}, "resource": alice(), "evaluations": [{}, {}, {}, {}]});
        assert_eq!(
            evaluations(&four, &BOUNDS).unwrap_err(),
            ShapeError::TooMany { count: 4, max: 3 }
        );
        let not_array = json!({"evaluations": {}});
        assert_eq!(
            evaluations(&not_array, &BOUNDS).unwrap_err(),
            ShapeError::NotArray("evaluations".into())
        );
    }

    #[test]
    fn the_three_semantics_and_no_other() {
        let with = |s: Value| json!({"subject": alice(), "action": {"name": "read"}, "resource": alice(), "options": {"evaluations_semantic": s, "other": 1}});
        for (name, semantic) in [
            ("execute_all", Semantic::ExecuteAll),
            ("deny_on_first_deny", Semantic::DenyOnFirstDeny),
            ("permit_on_first_permit", Semantic::PermitOnFirstPermit),
        ] {
            assert_eq!(
                evaluations(&with(json!(name)), &BOUNDS).unwrap().semantic,
                semantic
            );
        }
        assert_eq!(
            evaluations(&with(json!("first")), &BOUNDS).unwrap_err(),
            ShapeError::Semantic
        );
        assert!(Semantic::DenyOnFirstDeny.stops_after(false));
        assert!(!Semantic::DenyOnFirstDeny.stops_after(true));
        assert!(Semantic::PermitOnFirstPermit.stops_after(true));
        assert!(!Semantic::ExecuteAll.stops_after(false));
    }

    #[test]
    fn a_search_needs_the_searched_type_and_the_rest_in_full() {
        let record = json!({"type": "record", "id": "r1"});
        let body = json!({"subject": {"type": "user", "id": "ignored"}, "action": {"name": "read"}, "resource": record.clone(), "page": {"limit": 5, "token": ""}});
        let s = search(&body, SearchKind::Subject, &BOUNDS).unwrap();
        assert_eq!(
            (s.template.subject.type_name, s.template.subject.id),
            ("user", "")
        );
        assert_eq!((s.token, s.limit), (None, 5));
        let actionless = json!({"subject": alice(), "resource": record.clone(), "action": 7});
        let s = search(&actionless, SearchKind::Action, &BOUNDS).unwrap();
        assert_eq!(
            (s.template.action.name, s.limit),
            ("", 2),
            "an action search ignores `action`"
        );
        for (body, kind, error) in [
            (
                json!({"subject": {"type": "user"}, "resource": record.clone()}),
                SearchKind::Subject,
                ShapeError::Missing("action".into()),
            ),
            (
                json!({"action": {"name": "read"}, "resource": {"type": "record"}}),
                SearchKind::Resource,
                ShapeError::Missing("subject".into()),
            ),
            (
                json!({"subject": alice()}),
                SearchKind::Action,
                ShapeError::Missing("resource".into()),
            ),
            (
                json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": {"type": "record"}}),
                SearchKind::Subject,
                ShapeError::Missing("resource.id".into()),
            ),
            (
                json!({"subject": {"type": "user"}, "action": {"name": "read"}, "resource": {"type": "record"}}),
                SearchKind::Resource,
                ShapeError::Missing("subject.id".into()),
            ),
            (
                json!({"subject": {"type": "user"}, "resource": record.clone()}),
                SearchKind::Action,
                ShapeError::Missing("subject.id".into()),
            ),
        ] {
            assert_eq!(search(&body, kind, &BOUNDS).unwrap_err(), error, "{body}");
        }
        for limit in [
            json!(0),
            json!(6),
            json!(1_000_000),
            json!(-1),
            json!(1.5),
            json!("2"),
        ] {
            let body =
                json!({"subject": alice(), "resource": record.clone(), "page": {"limit": limit}});
            assert_eq!(
                search(&body, SearchKind::Action, &BOUNDS).unwrap_err(),
                ShapeError::PageLimit(5),
                "{limit}"
            );
        }
    }
}
