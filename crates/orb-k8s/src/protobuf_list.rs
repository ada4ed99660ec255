//! LISTs asked for as protobuf: pods read straight into [`Kept`], and the metadata of any
//! kind. For 5,000 pods the apiserver takes about a third of the time to write protobuf that
//! it takes to write JSON, and that write was most of a direct status read. Each request
//! accepts JSON as well, so an apiserver or proxy that answers JSON is read as before.
//!
//! Also the watch list ([`watch_list_kept`]): every pod a selector picks, sent as the first
//! events of a watch, which the apiserver writes from its watch cache as it goes.

use http::HeaderValue;
use http::header::{ACCEPT, CONTENT_TYPE};
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use std::time::Duration;

use kube::api::{ListParams, ObjectList, WatchParams};
use kube::core::Status;
use kube::{Api, Client};

use crate::kept::Kept;
use crate::kept::protobuf::{WatchFrame, WatchFrames};
use crate::protobuf_wire::{Fields, WireError, unwrap_kubernetes};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const PROTOBUF_OR_JSON: &str = "application/vnd.kubernetes.protobuf, application/json";
const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
const METADATA_PROTOBUF_OR_JSON: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json";

/// How the apiserver answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// One LIST page of pods, as kept.
#[derive(Debug)]
pub struct KeptPage {
    pub items: Vec<Kept>,
    pub encoding: Encoding,
    pub resource_version: Option<String>,
    /// The token of the next page, `None` on the last.
    pub continue_token: Option<String>,
}

/// The pods of `api`'s scope (a namespace, or all) that `params` select: one page of at
/// most `params.limit` pods, or all of them without a limit. Errors are kube's, as for a
/// JSON LIST: an answer orb cannot read is a decoding error naming what was wrong.
pub async fn list_kept(api: &Api<Kept>, params: &ListParams) -> Result<KeptPage, kube::Error> {
    let request = kube::core::Request::new(api.resource_url())
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    let (encoding, mut body) = open(&api.clone().into_client(), request, PROTOBUF_OR_JSON).await?;
    match encoding {
        Encoding::Protobuf => {
            // Read pod by pod as the body arrives (see `kept::protobuf::PodListStream`).
            let mut stream = crate::kept::protobuf::PodListStream::new();
            while let Some(frame) = body.frame().await {
                if let Ok(piece) = frame?.into_data() {
                    stream.push(&piece).map_err(|e| unreadable("pod list", e))?;
                }
            }
            let list = stream.finish().map_err(|e| unreadable("pod list", e))?;
            Ok(KeptPage {
                items: list.items,
                encoding,
                resource_version: list.resource_version,
                continue_token: list.continue_token,
            })
        }
        Encoding::Json => {
            let body = body.collect().await?.to_bytes();
            let list: ObjectList<Kept> =
                serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
            Ok(KeptPage {
                items: list.items,
                encoding,
                resource_version: list.metadata.resource_version,
                continue_token: list.metadata.continue_.filter(|c| !c.is_empty()),
            })
        }
    }
}

/// Server-side timeout of a watch list. Only its initial events are read (the watch is
/// closed at the bookmark that ends them), so this only bounds a stream that stalls.
const WATCH_LIST_TIMEOUT_SECS: u32 = 290;

/// How a watch list went.
#[derive(Debug)]
pub enum WatchList {
    /// Every pod the selector picks, and the resourceVersion they are current at (the
    /// bookmark's that ended them): a watch from it misses nothing.
    Synced {
        items: Vec<Kept>,
        resource_version: Option<String>,
    },
    /// No watch list came; read the pods with a paginated LIST instead. `lasting`: the
    /// apiserver (or a proxy before it) will not send one, so stop asking it.
    Declined { reason: String, lasting: bool },
}

/// The pods of `api`'s scope that `selector` picks, read as a watch list (Kubernetes'
/// streaming list: `sendInitialEvents=true`): the apiserver sends each pod as an `ADDED`
/// event from its watch cache, as it goes, then a bookmark annotated
/// `k8s.io/initial-events-end`. For 50,000 pods that is about a third of the time the same
/// pods take as LIST pages, which the apiserver prepares whole, page by page, before it
/// writes any. `quiet_limit` bounds the wait for each piece of the answer: an apiserver
/// that does not know watch lists keeps the watch open without ever sending the bookmark.
///
/// Errors are the ones a LIST would be retried after (429, 5xx, no connection); an
/// answer that means "no watch list here" (another 4xx, JSON, a stream without the
/// bookmark) is [`WatchList::Declined`].
pub async fn watch_list_kept(
    api: &Api<Kept>,
    selector: &str,
    quiet_limit: Duration,
) -> Result<WatchList, kube::Error> {
    let params = WatchParams::streaming_lists()
        .labels(selector)
        .timeout(WATCH_LIST_TIMEOUT_SECS);
    let request = kube::core::Request::new(api.resource_url())
        .watch(&params, "")
        .map_err(kube::Error::BuildRequest)?;
    let client = api.clone().into_client();
    let opened = tokio::time::timeout(quiet_limit, open(&client, request, PROTOBUF_WATCH)).await;
    let (encoding, body) = match opened {
        Err(_) => {
            return Ok(WatchList::Declined {
                reason: format!(
                    "no answer to the watch within {} s",
                    quiet_limit.as_secs_f64()
                ),
                lasting: false,
            });
        }
        Ok(Err(kube::Error::Api(status)))
            if (400..500).contains(&status.code) && status.code != 429 =>
        {
            // 400/406/415/422: the apiserver does not take the request at all (watch lists
            // switched off, protobuf refused); 401/403/404/410 may change.
            let lasting = matches!(status.code, 400 | 406 | 415 | 422);
            return Ok(WatchList::Declined {
                reason: format!(
                    "the apiserver answered {} {}: {}",
                    status.code, status.reason, status.message
                ),
                lasting,
            });
        }
        Ok(answer) => answer?,
    };
    if encoding != Encoding::Protobuf {
        return Ok(WatchList::Declined {
            reason: "the watch was answered as JSON, not protobuf".into(),
            lasting: true,
        });
    }
    Ok(initial_events(body, quiet_limit).await)
}

/// Reads a watch list's initial events from `body`, up to the bookmark that ends them.
async fn initial_events<B>(mut body: B, quiet_limit: Duration) -> WatchList
where
    B: hyper::body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let declined = |reason: String, lasting: bool| WatchList::Declined { reason, lasting };
    let (mut frames, mut events, mut items) = (WatchFrames::default(), Vec::new(), Vec::new());
    loop {
        let Ok(next) = tokio::time::timeout(quiet_limit, body.frame()).await else {
            // Pods then silence is an apiserver that took the watch as a plain one.
            return declined(
                format!(
                    "no end of the initial events within {} s of the last piece",
                    quiet_limit.as_secs_f64()
                ),
                !items.is_empty(),
            );
        };
        let piece = match next {
            None => {
                return declined(
                    "the watch ended before its initial events did".into(),
                    false,
                );
            }
            Some(Err(e)) => return declined(format!("the watch broke off: {e}"), false),
            Some(Ok(piece)) => piece,
        };
        let Ok(data) = piece.into_data() else {
            continue;
        };
        if let Err(e) = frames.push(&data, &mut events) {
            return declined(format!("the watch could not be read: {e}"), false);
        }
        for event in events.drain(..) {
            match event {
                WatchFrame::Added(pod) => items.push(*pod),
                WatchFrame::Bookmark {
                    initial_events_end: true,
                    resource_version,
                } => {
                    return WatchList::Synced {
                        items,
                        resource_version,
                    };
                }
                WatchFrame::Bookmark { .. } => {}
                WatchFrame::Error(status) => {
                    return declined(
                        format!(
                            "the watch ended with {} {}: {}",
                            status.code, status.reason, status.message
                        ),
                        false,
                    );
                }
                WatchFrame::Modified | WatchFrame::Deleted => {
                    return declined(
                        "the watch sent a change before the end of its initial events".into(),
                        true,
                    );
                }
            }
        }
    }
}

/// One page of a metadata-only LIST (`PartialObjectMetadataList`).
#[derive(Debug)]
pub struct MetadataPage {
    /// Each object's metadata, less `managedFields`.
    pub items: Vec<ObjectMeta>,
    pub encoding: Encoding,
    /// The token of the next page, `None` on the last.
    pub continue_token: Option<String>,
}

/// The metadata of the objects under `url_path` (e.g. `/apis/apps/v1/namespaces/x/deployments`)
/// that `params` select, one page. Reconciliation reads every managed object this way.
pub async fn list_metadata(
    client: &Client,
    url_path: &str,
    params: &ListParams,
) -> Result<MetadataPage, kube::Error> {
    let request = kube::core::Request::new(url_path)
        .list_metadata(params)
        .map_err(kube::Error::BuildRequest)?;
    let (encoding, body) = send(client, request, METADATA_PROTOBUF_OR_JSON).await?;
    match encoding {
        Encoding::Protobuf => {
            let list = crate::kept::protobuf::decode_metadata_list(&body)
                .map_err(|e| unreadable("metadata list", e))?;
            Ok(MetadataPage {
                items: list.items,
                encoding,
                continue_token: list.continue_token,
            })
        }
        Encoding::Json => json_metadata_page(&body).map_err(kube::Error::SerdeError),
    }
}

/// A metadata page as JSON (when an apiserver or proxy will not answer protobuf), its
/// `managedFields` skipped unparsed.
pub(crate) fn json_metadata_page(body: &[u8]) -> Result<MetadataPage, serde_json::Error> {
    let list: JsonMetadataList = serde_json::from_slice(body)?;
    Ok(MetadataPage {
        items: list
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|item| item.metadata)
            .collect(),
        encoding: Encoding::Json,
        continue_token: list.metadata.continue_.filter(|c| !c.is_empty()),
    })
}

#[derive(serde::Deserialize)]
struct JsonMetadataList {
    #[serde(default)]
    metadata: ListMeta,
    /// `null` when the list is empty.
    items: Option<Vec<JsonMetadataItem>>,
}

#[derive(serde::Deserialize)]
struct JsonMetadataItem {
    #[serde(default, deserialize_with = "crate::kept::meta_without_managed_fields")]
    metadata: ObjectMeta,
}

/// Sends `request` accepting `accept`, and gives the body and how it is encoded; an error
/// status becomes kube's `Error::Api` with the apiserver's `Status`, in either encoding.
async fn send(
    client: &Client,
    request: http::Request<Vec<u8>>,
    accept: &'static str,
) -> Result<(Encoding, bytes::Bytes), kube::Error> {
    let (encoding, body) = open(client, request, accept).await?;
    Ok((encoding, body.collect().await?.to_bytes()))
}

/// As [`send`], the body left to be read as it arrives.
async fn open(
    client: &Client,
    mut request: http::Request<Vec<u8>>,
    accept: &'static str,
) -> Result<(Encoding, kube::client::Body), kube::Error> {
    request
        .headers_mut()
        .insert(ACCEPT, HeaderValue::from_static(accept));
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let code = response.status();
    let encoding = match response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    {
        Some(v) if v.starts_with(PROTOBUF) => Encoding::Protobuf,
        _ => Encoding::Json,
    };
    let body = response.into_body();
    if code.is_client_error() || code.is_server_error() {
        let body = body.collect().await?.to_bytes();
        return Err(kube::Error::Api(Box::new(error_status(
            code.as_u16(),
            &body,
            encoding == Encoding::Protobuf,
        ))));
    }
    Ok((encoding, body))
}

fn unreadable(what: &str, e: WireError) -> kube::Error {
    kube::Error::SerdeError(serde::de::Error::custom(format!(
        "the apiserver's protobuf {what} could not be read: {e}"
    )))
}

/// The `Status` an apiserver sends with an error, in the encoding it answered with; a body
/// that is neither (a proxy's text page) becomes the message, as kube does for JSON calls.
fn error_status(code: u16, body: &[u8], protobuf: bool) -> Status {
    let decoded = if protobuf {
        protobuf_status(body).ok()
    } else {
        serde_json::from_slice::<Status>(body).ok()
    };
    decoded.unwrap_or_else(|| {
        Status::failure(
            String::from_utf8_lossy(body).trim(),
            "Failed to parse error data",
        )
        .with_code(code)
    })
}

pub(crate) fn protobuf_status(body: &[u8]) -> Result<Status, WireError> {
    let raw = unwrap_kubernetes(body, "Status")?;
    let (mut message, mut reason, mut code) = ("", "", 0);
    for field in Fields::new(raw) {
        let field = field?;
        match field.number {
            3 => message = field.str()?,
            4 => reason = field.str()?,
            6 => code = field.int32()?,
            _ => {}
        }
    }
    Ok(Status::failure(message, reason).with_code(u16::try_from(code).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kept::protobuf::watch_tests::{frame, named, stream_of};
    use crate::pod_read::PodRead;
    use crate::protobuf_wire::tests::{W, encode, kubernetes_body};

    /// A body of `pieces`, then either its end or, with `stall`, nothing ever again.
    fn body_of(
        pieces: Vec<Vec<u8>>,
        stall: bool,
    ) -> impl hyper::body::Body<Data = bytes::Bytes, Error = std::convert::Infallible> + Unpin {
        use futures::StreamExt;
        let frames = futures::stream::iter(pieces).map(|p| {
            Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes::Bytes::from(p)))
        });
        let tail = if stall {
            futures::stream::pending().boxed()
        } else {
            futures::stream::empty().boxed()
        };
        http_body_util::StreamBody::new(frames.chain(tail))
    }

    const QUIET: Duration = Duration::from_millis(50);

    fn outcome(list: WatchList) -> String {
        match list {
            WatchList::Synced {
                items,
                resource_version,
            } => format!(
                "synced {:?} at {resource_version:?}",
                items
                    .iter()
                    .map(|p| p.name().to_string())
                    .collect::<Vec<_>>()
            ),
            WatchList::Declined { reason, lasting } => {
                format!("declined lasting={lasting}: {reason}")
            }
        }
    }

    #[tokio::test]
    async fn a_watch_list_is_read_to_the_bookmark_that_ends_its_initial_events() {
        let body = stream_of(&["a", "b", "c"]);
        // In pieces that cut frames anywhere; the stream then stays open, as a watch does.
        let pieces = body.chunks(7).map(<[u8]>::to_vec).collect();
        assert_eq!(
            outcome(initial_events(body_of(pieces, true), QUIET).await),
            r#"synced ["a", "b", "c"] at Some("4711")"#
        );
    }

    #[tokio::test]
    async fn a_watch_without_the_end_of_its_initial_events_is_declined() {
        let added = frame("ADDED", named("a"));
        // Pods, then silence: an apiserver that took the watch as a plain one.
        let said = outcome(initial_events(body_of(vec![added.clone()], true), QUIET).await);
        assert!(
            said.starts_with("declined lasting=true: no end of the initial events"),
            "{said}"
        );
        // Silence from the start may be a slow apiserver: ask again next time.
        let said = outcome(initial_events(body_of(vec![], true), QUIET).await);
        assert!(said.starts_with("declined lasting=false: no end"), "{said}");
        // Ended early, broken, or a change before the end.
        let said = outcome(initial_events(body_of(vec![added.clone()], false), QUIET).await);
        assert_eq!(
            said,
            "declined lasting=false: the watch ended before its initial events did"
        );
        let said =
            outcome(initial_events(body_of(vec![vec![0, 0, 0, 1, 0xff]], false), QUIET).await);
        assert!(
            said.starts_with("declined lasting=false: the watch could not be read"),
            "{said}"
        );
        let changed = [added, frame("MODIFIED", named("a"))].concat();
        let said = outcome(initial_events(body_of(vec![changed], true), QUIET).await);
        assert_eq!(
            said,
            "declined lasting=true: the watch sent a change before the end of its initial events"
        );
        let expired = kubernetes_body(
            "Status",
            encode(&[(3, W::S("too old")), (4, W::S("Expired")), (6, W::V(410))]),
        );
        let said =
            outcome(initial_events(body_of(vec![frame("ERROR", expired)], true), QUIET).await);
        assert_eq!(
            said,
            "declined lasting=false: the watch ended with 410 Expired: too old"
        );
    }

    #[test]
    fn an_error_status_reads_from_protobuf_json_or_text() {
        let forbidden = kubernetes_body(
            "Status",
            encode(&[
                (2, W::S("Failure")),
                (3, W::S("pods is forbidden: User \"x\" cannot list")),
                (4, W::S("Forbidden")),
                (6, W::V(403)),
            ]),
        );
        let status = error_status(403, &forbidden, true);
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (
                403,
                "Forbidden",
                "pods is forbidden: User \"x\" cannot list"
            )
        );
        let json = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no","reason":"NotFound","code":404}"#;
        let status = error_status(404, json, false);
        assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
        let status = error_status(502, b" <html>bad gateway</html>\n", true);
        assert_eq!(
            (status.code, status.message.as_str()),
            (502, "<html>bad gateway</html>")
        );
    }
}
