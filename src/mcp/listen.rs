//! `subscriptions/listen` (2026-07-28): one long-lived SSE answer per
//! request that tells the client when the tools it may see have changed.
//!
//! The stream opens after the same prelude as any request (key, session,
//! isolation, header check, `access_session`). Its first event is
//! `notifications/subscriptions/acknowledged` with the subset of the
//! client's filter the gateway honours (`toolsListChanged`,
//! `resourcesListChanged`, `promptsListChanged`; not resource
//! subscriptions). Then, whenever what a session may see can have changed
//! (a policy reload, an admin change of the org: peers, upstream servers,
//! the project's graph gate; the same on another instance; an upstream
//! announcing that one of its lists changed), the stream
//! re-runs the prelude and, for each list it follows, the decisions of
//! that list (`view_tool` for tools, `read_resource` / `get_prompt` for
//! the upstreams' resources, templates and prompts; recorded like the
//! list), and sends `notifications/<list>/list_changed` only if the names
//! the agent may see differ. Resources and templates count as one list,
//! as `resources/list_changed` covers both. A list that cannot be read at
//! a re-check (an upstream down) keeps its last names rather than
//! announcing a change that did not happen.
//! Every notification carries the request's id as
//! `io.modelcontextprotocol/subscriptionId`.
//!
//! Closing the stream cancels the subscription. It ends by itself when the
//! session can no longer be used (key revoked, `access_session` now
//! denied), and at shutdown with a final result, as the revision asks of a
//! graceful end. Listen streams count against the same per-key bound as
//! HTTP+SSE streams (`sse.max_streams_per_key`, more: 429) and get the
//! same keep-alive comments.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

use super::call::{Call, admit, prepare};
use super::discover::server_info;
use super::era::META_SERVER_INFO;
use super::error::McpError;
use super::jsonrpc::Id;
use super::streams::Registration;
use super::{entries, protocol, tools_list};
use crate::gateway::Gateway;
use crate::upstream::entries::EntryKind;

/// How often a stream checks that it is still registered.
const SHUTDOWN_CHECK: Duration = Duration::from_secs(1);

/// `_meta` key tying a notification to its subscription.
const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// What a listening stream needs after its request returned.
struct Listener {
    gw: Arc<Gateway>,
    target: super::call::Target,
    headers: HeaderMap,
    stream_id: Uuid,
    tx: mpsc::Sender<Event>,
    subscription: Value,
    follows: Follows,
    seen: Seen,
}

/// The lists a subscription asked to hear about.
#[derive(Debug, Clone, Copy)]
struct Follows {
    tools: bool,
    resources: bool,
    prompts: bool,
}

impl Follows {
    /// Read from the request's `notifications` filter.
    fn of(params: &Value) -> Follows {
        let asked = |k: &str| params["notifications"][k].as_bool() == Some(true);
        Follows {
            tools: asked("toolsListChanged"),
            resources: asked("resourcesListChanged"),
            prompts: asked("promptsListChanged"),
        }
    }

    /// The filter the gateway honours: what was asked of these lists.
    fn honoured(self) -> Value {
        let mut map = serde_json::Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("resourcesListChanged", self.resources),
            ("promptsListChanged", self.prompts),
        ] {
            if on {
                map.insert(key.into(), Value::Bool(true));
            }
        }
        Value::Object(map)
    }
}

/// The names the agent may see in each followed list (`None`: not
/// followed, or not readable this time).
#[derive(Debug, Default)]
struct Seen {
    tools: Option<BTreeSet<String>>,
    resources: Option<BTreeSet<String>>,
    prompts: Option<BTreeSet<String>>,
}

/// The names of `call`'s visible entries of every followed list.
async fn seen_by(call: &Call, follows: Follows) -> Seen {
    Seen {
        tools: follows.tools.then(|| visible_names(call)),
        resources: if follows.resources {
            entry_names(call, &[EntryKind::Resources, EntryKind::Templates]).await
        } else {
            None
        },
        prompts: if follows.prompts {
            entry_names(call, &[EntryKind::Prompts]).await
        } else {
            None
        },
    }
}

/// The ids of the entries of `kinds` the agent may see (decisions
/// deferred); `None` when a list cannot be read.
async fn entry_names(call: &Call, kinds: &[EntryKind]) -> Option<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for &kind in kinds {
        let list = entries::list(call, kind).await.ok()?;
        let items = list[kind.key()].as_array().cloned().unwrap_or_default();
        names.extend(
            items
                .iter()
                .filter_map(|e| e[kind.id_field()].as_str())
                .map(|id| format!("{}:{id}", kind.key())),
        );
    }
    Some(names)
}

/// Opens the stream of `subscriptions/listen` request `id`.
pub async fn open(
    call: &Call,
    headers: &HeaderMap,
    id: &Id,
    params: &Value,
) -> Result<Response, McpError> {
    let gw = Arc::clone(&call.gw);
    let session_id = call.view.tenant.session.id.clone();
    let (stream_id, rx) = gw.streams.open(&session_id, &call.view.key.id)?;
    let registration = Registration {
        streams: gw.streams.clone(),
        id: stream_id,
    };
    let tx = gw
        .streams
        .get(&stream_id)
        .map(|entry| entry.tx)
        .ok_or(McpError::Closing("the gateway is shutting down"))?;
    let follows = Follows::of(params);
    let subscription: Value = serde_json::from_str(id.as_raw()).unwrap_or(Value::Null);
    // Subscribe before taking the baseline, so no change falls between.
    let changes = gw.watch_changes();
    let seen = seen_by(call, follows).await;
    let honoured = follows.honoured();
    let ack = notification(
        "notifications/subscriptions/acknowledged",
        &subscription,
        json!({ "notifications": honoured }),
    );
    // The buffer is fresh, so this cannot wait.
    let _ = tx.try_send(ack);
    let keepalive = Duration::from_secs(gw.config.sse.keepalive_secs.max(1));
    let listener = Listener {
        gw,
        target: call.target.clone(),
        headers: headers.clone(),
        stream_id,
        tx,
        subscription,
        follows,
        seen,
    };
    tokio::spawn(listener.run(changes, keepalive));
    let events = ReceiverStream::new(rx).map(move |event| {
        let _held = &registration;
        Ok::<Event, Infallible>(event)
    });
    let mut resp = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(keepalive).text("keep-alive"))
        .into_response();
    let h = resp.headers_mut();
    h.insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    h.insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    Ok(resp)
}

/// The names of the tools the call's agent may view (decisions deferred).
fn visible_names(call: &Call) -> BTreeSet<String> {
    tools_list::visible(call)
        .iter()
        .map(|s| s.name.clone())
        .collect()
}

/// One SSE `message` event holding a notification of this subscription.
fn notification(method: &str, subscription: &Value, mut params: Value) -> Event {
    if let Value::Object(map) = &mut params {
        map.insert("_meta".into(), json!({ META_SUBSCRIPTION: subscription }));
    }
    let message = json!({ "jsonrpc": "2.0", "method": method, "params": params });
    Event::default().event("message").data(message.to_string())
}

impl Listener {
    /// Waits for changes until the client leaves, the session is no
    /// longer usable, or the gateway shuts down.
    async fn run(mut self, mut changes: tokio::sync::watch::Receiver<u64>, keepalive: Duration) {
        // How soon a shutdown (or a terminated session) ends the stream.
        let mut tick = tokio::time::interval(SHUTDOWN_CHECK.min(keepalive));
        loop {
            tokio::select! {
                () = self.tx.closed() => break,
                changed = changes.changed() => {
                    if changed.is_err() || !self.recheck().await {
                        break;
                    }
                }
                _ = tick.tick() => {
                    if self.gw.streams.get(&self.stream_id).is_none() {
                        self.finish().await;
                        break;
                    }
                }
            }
        }
    }

    /// Re-decides the followed lists; sends each one's `list_changed` when
    /// its names differ. False when the stream should end.
    async fn recheck(&mut self) -> bool {
        let follows = self.follows;
        if !(follows.tools || follows.resources || follows.prompts) {
            return true;
        }
        let Some(now) = self.seen_now().await else {
            return false;
        };
        let changes = [
            ("notifications/tools/list_changed", now.tools, 0),
            ("notifications/resources/list_changed", now.resources, 1),
            ("notifications/prompts/list_changed", now.prompts, 2),
        ];
        for (method, names, which) in changes {
            let Some(names) = names else { continue };
            let last = match which {
                0 => &mut self.seen.tools,
                1 => &mut self.seen.resources,
                _ => &mut self.seen.prompts,
            };
            if last.as_ref() == Some(&names) {
                continue;
            }
            // A list first read now (it could not be at the last check)
            // is a baseline, not a change.
            let announce = last.is_some();
            *last = Some(names);
            if announce {
                let note = notification(method, &self.subscription, json!({}));
                if self.tx.send(note).await.is_err() {
                    return false;
                }
            }
        }
        true
    }

    /// The prelude and the followed lists' decisions again; `None` when
    /// the session can no longer be used.
    async fn seen_now(&self) -> Option<Seen> {
        let version = Some(protocol::MODERN.to_string());
        let call = prepare(&self.gw, &self.target, &self.headers, version, &[])
            .await
            .ok()?;
        let admitted = admit(&call).await;
        let seen = match admitted {
            Ok(_) => Some(seen_by(&call, self.follows).await),
            Err(_) => None,
        };
        call.flush_deferred().await;
        seen
    }

    /// The graceful end: the request's own (empty) result.
    async fn finish(&self) {
        let result = json!({
            "jsonrpc": "2.0",
            "id": self.subscription,
            "result": {
                "resultType": "complete",
                "_meta": { META_SUBSCRIPTION: self.subscription, META_SERVER_INFO: server_info() },
            },
        });
        let _ = self
            .tx
            .send(Event::default().event("message").data(result.to_string()))
            .await;
    }
}
