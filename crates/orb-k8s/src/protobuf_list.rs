//! LISTs asked for as protobuf: pods read straight into [`Kept`], and the metadata of any
//! kind. For 5,000 pods the apiserver takes about a third of the time to write protobuf that
//! it takes to write JSON, and that write was most of a direct status read. Each request
//! accepts JSON as well, so an apiserver or proxy that answers JSON is read as before.

use http::HeaderValue;
use http::header::{ACCEPT, CONTENT_TYPE};
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use kube::api::{ListParams, ObjectList};
use kube::core::Status;
use kube::{Api, Client};

use crate::kept::Kept;
use crate::protobuf_wire::{Fields, WireError, unwrap_kubernetes};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const PROTOBUF_OR_JSON: &str = "application/vnd.kubernetes.protobuf, application/json";
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
    open_kept(api, params).await?.finish().await
}

/// Every pod `params` select, page by page (`params.limit` a page), each page handed to
/// `each` in order. The next page is asked for as soon as the current one's metadata is in
/// (the apiserver writes it before the items), so the apiserver writes page n + 1 while
/// page n is still arriving and being read, instead of waiting for orb's next request.
pub async fn list_kept_pages(
    api: &Api<Kept>,
    params: &ListParams,
    mut each: impl FnMut(KeptPage),
) -> Result<(), kube::Error> {
    let mut page = open_kept(api, params).await?;
    loop {
        let Some(token) = page.next_token().await? else {
            each(page.finish().await?);
            return Ok(());
        };
        let next = params.clone().continue_token(&token);
        // On an error in either, the other is dropped (its connection closed).
        let (read, next) = tokio::try_join!(page.finish(), open_kept(api, &next))?;
        each(read);
        page = next;
    }
}

/// A LIST page of pods whose answer has begun to arrive.
pub struct OpenKeptPage {
    body: kube::client::Body,
    /// The body has ended (it is not polled again).
    ended: bool,
    read: PageRead,
}

enum PageRead {
    /// Read pod by pod as the body arrives (see `kept::protobuf::PodListStream`).
    Protobuf(crate::kept::protobuf::PodListStream),
    /// A JSON answer is read whole, the first time anything of it is asked for.
    Json(Option<KeptPage>),
}

/// Sends the LIST of one page and returns once the answer's head is in.
pub async fn open_kept(api: &Api<Kept>, params: &ListParams) -> Result<OpenKeptPage, kube::Error> {
    let request = kube::core::Request::new(api.resource_url())
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    let (encoding, body) = open(&api.clone().into_client(), request, PROTOBUF_OR_JSON).await?;
    let read = match encoding {
        Encoding::Protobuf => PageRead::Protobuf(crate::kept::protobuf::PodListStream::new()),
        Encoding::Json => PageRead::Json(None),
    };
    Ok(OpenKeptPage {
        body,
        ended: false,
        read,
    })
}

impl OpenKeptPage {
    /// The next page's token (`None` on the last page), reading no further into the body
    /// than the list's metadata.
    pub async fn next_token(&mut self) -> Result<Option<String>, kube::Error> {
        match &mut self.read {
            PageRead::Protobuf(stream) => loop {
                if let Some(token) = stream.continue_token() {
                    return Ok(token.map(str::to_string));
                }
                // The body ended before the list's metadata: `finish` says what is wrong.
                if !push_frame(&mut self.body, stream).await? {
                    self.ended = true;
                    return Ok(None);
                }
            },
            PageRead::Json(page) => {
                let page = match page {
                    Some(page) => page,
                    None => page.insert(read_json(&mut self.body).await?),
                };
                Ok(page.continue_token.clone())
            }
        }
    }

    /// The rest of the page.
    pub async fn finish(mut self) -> Result<KeptPage, kube::Error> {
        match self.read {
            PageRead::Protobuf(mut stream) => {
                while !self.ended && push_frame(&mut self.body, &mut stream).await? {}
                let list = stream.finish().map_err(|e| unreadable("pod list", e))?;
                Ok(KeptPage {
                    items: list.items,
                    encoding: Encoding::Protobuf,
                    resource_version: list.resource_version,
                    continue_token: list.continue_token,
                })
            }
            PageRead::Json(Some(page)) => Ok(page),
            PageRead::Json(None) => read_json(&mut self.body).await,
        }
    }
}

/// Reads the body's next frame into `stream`; false once the body has ended.
async fn push_frame(
    body: &mut kube::client::Body,
    stream: &mut crate::kept::protobuf::PodListStream,
) -> Result<bool, kube::Error> {
    match body.frame().await {
        None => Ok(false),
        Some(frame) => {
            if let Ok(piece) = frame?.into_data() {
                stream.push(&piece).map_err(|e| unreadable("pod list", e))?;
            }
            Ok(true)
        }
    }
}

/// A JSON page, read whole.
async fn read_json(body: &mut kube::client::Body) -> Result<KeptPage, kube::Error> {
    let body = body.collect().await?.to_bytes();
    let list: ObjectList<Kept> = serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
    Ok(KeptPage {
        items: list.items,
        encoding: Encoding::Json,
        resource_version: list.metadata.resource_version,
        continue_token: json_continue(list.metadata.continue_),
    })
}

/// A JSON list's next-page token: the apiserver writes an empty one on the last page.
fn json_continue(token: Option<String>) -> Option<String> {
    token.filter(|c| !c.is_empty())
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
        continue_token: json_continue(list.metadata.continue_),
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

fn protobuf_status(body: &[u8]) -> Result<Status, WireError> {
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
    use crate::protobuf_wire::tests::{W, encode, kubernetes_body};

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
