//! A protobuf watch stream (`application/vnd.kubernetes.protobuf;stream=watch`) read into
//! events as it arrives. Each frame is a four-byte big-endian length and a
//! `metav1.WatchEvent`: its `type` (field 1) and its object (field 2, a `RawExtension` whose
//! field 1 is the object as a whole Kubernetes protobuf body, magic and envelope included).

use kube::core::Status;

use super::{Kept, pod};
use crate::protobuf_wire::{Fields, WireError, unwrap_kubernetes};

/// The longest frame read. An object is at most a few MiB (etcd refuses larger writes), so
/// a longer length is a broken or hostile stream, not one to buffer.
const MAX_FRAME: usize = 64 << 20;

/// The annotation on the bookmark that ends a watch list's initial events.
pub(crate) const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// One event of a pod watch.
#[derive(Debug)]
pub(crate) enum WatchFrame {
    Added(Box<Kept>),
    /// A pod changed; what it became is not read (nothing orb does with a watch list needs it).
    Modified,
    Deleted,
    Bookmark {
        resource_version: Option<String>,
        /// The bookmark that follows the last initial event of a watch list.
        initial_events_end: bool,
    },
    /// The apiserver ended the watch with this `Status`.
    Error(Box<Status>),
}

/// Splits a watch body into frames: [`push`](Self::push) each piece as it comes.
#[derive(Debug, Default)]
pub(crate) struct WatchFrames {
    /// Bytes received and not yet read: at most one frame in flight.
    pending: Vec<u8>,
}

impl WatchFrames {
    /// Reads the events `piece` completes into `out`. Errors are final.
    pub(crate) fn push(
        &mut self,
        mut piece: &[u8],
        out: &mut Vec<WatchFrame>,
    ) -> Result<(), WireError> {
        if !self.pending.is_empty() {
            // Complete the frame in flight from the front of `piece`; the whole frames after
            // it are read in place, not copied.
            let head = self.pending.len().min(4);
            let take = (4 - head).min(piece.len());
            self.pending.extend_from_slice(&piece[..take]);
            piece = &piece[take..];
            let Some(prefix) = self.pending.get(..4) else {
                return Ok(());
            };
            let whole = 4 + frame_len(prefix)?;
            let take = (whole - self.pending.len()).min(piece.len());
            self.pending.extend_from_slice(&piece[..take]);
            piece = &piece[take..];
            if self.pending.len() < whole {
                return Ok(());
            }
            out.push(event(&self.pending[4..])?);
            self.pending.clear();
        }
        let used = frames(piece, out)?;
        self.pending.extend_from_slice(&piece[used..]);
        Ok(())
    }
}

/// The length a frame's four-byte prefix declares, refused past [`MAX_FRAME`].
fn frame_len(prefix: &[u8]) -> Result<usize, WireError> {
    let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
    if len > MAX_FRAME {
        return Err(WireError::Envelope(format!(
            "a watch frame claims {len} bytes, more than the {MAX_FRAME} orb reads"
        )));
    }
    Ok(len)
}

/// Reads every whole frame at the start of `buf`; gives how many bytes it read.
fn frames(buf: &[u8], out: &mut Vec<WatchFrame>) -> Result<usize, WireError> {
    let mut at = 0;
    while let Some(prefix) = buf.get(at..at + 4) {
        let len = frame_len(prefix)?;
        let Some(frame) = buf.get(at + 4..at + 4 + len) else {
            break;
        };
        out.push(event(frame)?);
        at += 4 + len;
    }
    Ok(at)
}

/// One `WatchEvent`.
fn event(frame: &[u8]) -> Result<WatchFrame, WireError> {
    let (mut kind, mut object) = ("", None);
    for field in Fields::new(frame) {
        let field = field?;
        match field.number {
            1 => kind = field.str()?,
            2 => {
                for raw in field.message()? {
                    let raw = raw?;
                    if raw.number == 1 {
                        object = Some(raw.bytes()?);
                    }
                }
            }
            _ => {}
        }
    }
    let object = object.ok_or_else(|| {
        WireError::Envelope(format!("a watch event of type {kind:?} carries no object"))
    })?;
    if kind == "ERROR" {
        return crate::protobuf_list::protobuf_status(object)
            .map(|s| WatchFrame::Error(Box::new(s)));
    }
    let kept = pod(Fields::new(unwrap_kubernetes(object, "Pod")?))?;
    Ok(match kind {
        "ADDED" => WatchFrame::Added(Box::new(kept)),
        "MODIFIED" => WatchFrame::Modified,
        "DELETED" => WatchFrame::Deleted,
        "BOOKMARK" => WatchFrame::Bookmark {
            initial_events_end: kept
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INITIAL_EVENTS_END))
                .is_some_and(|v| v == "true"),
            resource_version: kept.metadata.resource_version,
        },
        other => {
            return Err(WireError::Envelope(format!(
                "a watch event of type {other:?}, which is not one Kubernetes sends"
            )));
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pod_read::PodRead;
    use crate::protobuf_wire::tests::{W, encode, kubernetes_body};

    /// A pod with a name and a namespace, nothing else.
    pub(crate) fn named(name: &'static str) -> Vec<u8> {
        kubernetes_body(
            "Pod",
            encode(&[(1, W::M(vec![(1, W::S(name)), (3, W::S("ns"))]))]),
        )
    }

    /// One frame as the apiserver writes it: length, then the event.
    pub(crate) fn frame(kind: &'static str, object: Vec<u8>) -> Vec<u8> {
        let event = encode(&[(1, W::S(kind)), (2, W::M(vec![(1, W::Raw(object))]))]);
        let mut out = (event.len() as u32).to_be_bytes().to_vec();
        out.extend(event);
        out
    }

    pub(crate) fn bookmark(resource_version: &'static str, end: bool) -> Vec<u8> {
        let mut meta = vec![(6, W::S(resource_version))];
        if end {
            meta.push((
                12,
                W::M(vec![(1, W::S(INITIAL_EVENTS_END)), (2, W::S("true"))]),
            ));
        }
        frame(
            "BOOKMARK",
            kubernetes_body("Pod", encode(&[(1, W::M(meta))])),
        )
    }

    pub(crate) fn stream_of(names: &[&'static str]) -> Vec<u8> {
        let mut body = Vec::new();
        for name in names {
            body.extend(frame("ADDED", named(name)));
        }
        body.extend(bookmark("4711", true));
        body
    }

    fn read_in(pieces: &[&[u8]]) -> Result<Vec<WatchFrame>, WireError> {
        let (mut frames, mut out) = (WatchFrames::default(), Vec::new());
        for piece in pieces {
            frames.push(piece, &mut out)?;
        }
        Ok(out)
    }

    fn describe(frames: &[WatchFrame]) -> Vec<String> {
        frames
            .iter()
            .map(|f| match f {
                WatchFrame::Added(p) => format!("added {}", p.name()),
                WatchFrame::Modified => "modified".into(),
                WatchFrame::Deleted => "deleted".into(),
                WatchFrame::Bookmark {
                    resource_version,
                    initial_events_end,
                } => format!("bookmark {resource_version:?} end={initial_events_end}"),
                WatchFrame::Error(s) => format!("error {} {}", s.code, s.reason),
            })
            .collect()
    }

    #[test]
    fn a_stream_split_anywhere_reads_as_the_whole() {
        let body = stream_of(&["a", "b"]);
        let whole = read_in(&[&body]).unwrap();
        assert_eq!(
            describe(&whole),
            ["added a", "added b", "bookmark Some(\"4711\") end=true"]
        );
        for cut in 0..=body.len() {
            let split = read_in(&[&body[..cut], &body[cut..]]).unwrap();
            assert_eq!(describe(&split), describe(&whole), "split at {cut}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(describe(&read_in(&bytes).unwrap()), describe(&whole));
    }

    #[test]
    fn a_stream_cut_anywhere_gives_the_events_whole_before_the_cut() {
        let body = stream_of(&["a"]);
        let first = frame("ADDED", named("a")).len();
        for cut in 0..body.len() {
            let read = read_in(&[&body[..cut]]).unwrap();
            assert_eq!(read.len(), usize::from(cut >= first), "cut at {cut}");
        }
    }

    #[test]
    fn events_of_every_type_and_an_error_status_are_read() {
        let status = kubernetes_body(
            "Status",
            encode(&[
                (3, W::S("too old resource version")),
                (4, W::S("Expired")),
                (6, W::V(410)),
            ]),
        );
        let mut body = frame("MODIFIED", named("m"));
        body.extend(frame("DELETED", named("d")));
        body.extend(bookmark("9", false));
        body.extend(frame("ERROR", status));
        assert_eq!(
            describe(&read_in(&[&body]).unwrap()),
            [
                "modified",
                "deleted",
                "bookmark Some(\"9\") end=false",
                "error 410 Expired"
            ]
        );
    }

    #[test]
    fn hostile_frames_are_refused_not_trusted() {
        // A length of 4 GiB is refused before anything is buffered for it.
        let huge = [0xff, 0xff, 0xff, 0xff, 1, 2, 3];
        assert!(matches!(read_in(&[&huge]), Err(WireError::Envelope(e)) if e.contains("claims")));
        let bytes: Vec<&[u8]> = huge.chunks(1).collect();
        assert!(matches!(read_in(&bytes), Err(WireError::Envelope(e)) if e.contains("claims")));
        // An event without an object, of an unknown type, or wrapping another kind.
        let empty = {
            let event = encode(&[(1, W::S("ADDED"))]);
            let mut out = (event.len() as u32).to_be_bytes().to_vec();
            out.extend(event);
            out
        };
        assert!(read_in(&[&empty]).is_err());
        let odd = frame("RENAMED", named("a"));
        assert!(matches!(read_in(&[&odd]), Err(WireError::Envelope(e)) if e.contains("RENAMED")));
        let node = frame(
            "ADDED",
            kubernetes_body("Node", encode(&[(1, W::M(vec![(1, W::S("n"))]))])),
        );
        assert!(matches!(read_in(&[&node]), Err(WireError::Envelope(e)) if e.contains("Node")));
        // A frame whose event runs past its own length cannot be framed.
        let mut short = frame("ADDED", named("a"));
        let len = u32::from_be_bytes([short[0], short[1], short[2], short[3]]) - 5;
        short[..4].copy_from_slice(&len.to_be_bytes());
        assert!(read_in(&[&short]).is_err());
    }
}
