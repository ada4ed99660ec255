//! A protobuf pod list read while it arrives. Collecting 5,000 pods (12 MB) before reading
//! them meant one large buffer, a copy into it, and the decode only after the last byte;
//! read piece by piece, each pod is decoded as soon as its bytes are in, while the apiserver
//! is still writing the rest, and only the pod in flight is held.
//!
//! The envelope is read in the order the apiserver writes it: magic, `typeMeta` (the kind is
//! checked before any pod is read), the `raw` PodList, then `contentEncoding` and
//! `contentType`, which must not name a compression or another encoding.

use super::{PodListRead, list_meta, pod};
use crate::protobuf_wire::{
    Field, KUBERNETES_MAGIC, WireError, check_envelope_encoding, check_kind, envelope_kind,
    first_field, header, no_magic,
};

/// Reads a `PodList` body from its pieces: [`push`](Self::push) each as it comes, then
/// [`finish`](Self::finish).
#[derive(Debug)]
pub(crate) struct PodListStream {
    /// Bytes received and not yet read: at most one field in flight.
    pending: Vec<u8>,
    stage: Stage,
    kind: Option<String>,
    read: PodListRead,
    /// The list's metadata (resourceVersion, continue token) has been read.
    meta_read: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Magic,
    /// The envelope's fields before the list.
    Envelope,
    /// Inside the list, `left` bytes of it still to read.
    List {
        left: u64,
    },
    /// The envelope's fields after the list.
    Trailer,
}

impl PodListStream {
    pub(crate) fn new() -> Self {
        Self {
            pending: Vec::new(),
            stage: Stage::Magic,
            kind: None,
            read: PodListRead::default(),
            meta_read: false,
        }
    }

    /// The next page's token, once the list's metadata has been read (`Some(None)` on the
    /// last page). The apiserver writes the metadata before the items, so this is known
    /// after the first few bytes of the list; a list that held none is known at its end.
    pub(crate) fn continue_token(&self) -> Option<Option<&str>> {
        (self.meta_read || matches!(self.stage, Stage::Trailer))
            .then_some(self.read.continue_token.as_deref())
    }

    /// Reads what `piece` completes. Errors are final: the body cannot be framed past one.
    pub(crate) fn push(&mut self, piece: &[u8]) -> Result<(), WireError> {
        if self.pending.is_empty() {
            let used = self.consume(piece)?;
            self.pending.extend_from_slice(&piece[used..]);
        } else {
            let mut pending = std::mem::take(&mut self.pending);
            pending.extend_from_slice(piece);
            let used = self.consume(&pending)?;
            pending.drain(..used);
            self.pending = pending;
        }
        Ok(())
    }

    /// The list, once the body has ended; a body that stopped inside a field or before the
    /// list ended is truncated.
    pub(crate) fn finish(self) -> Result<PodListRead, WireError> {
        match self.stage {
            Stage::Magic => Err(no_magic()),
            _ if !self.pending.is_empty() => Err(WireError::Truncated("pod list")),
            Stage::List { left } if left > 0 => Err(WireError::Truncated("pod list")),
            // An envelope without a list holds an empty one, if it says it is a PodList.
            Stage::Envelope => {
                check_kind(self.kind.as_deref().unwrap_or(""), "PodList")?;
                Ok(self.read)
            }
            Stage::List { .. } | Stage::Trailer => Ok(self.read),
        }
    }

    /// Reads every whole field at the start of `buf`; gives how many bytes it read.
    fn consume(&mut self, buf: &[u8]) -> Result<usize, WireError> {
        let mut at = 0;
        loop {
            let rest = &buf[at..];
            match self.stage {
                Stage::Magic => {
                    if rest.len() < KUBERNETES_MAGIC.len() {
                        if !KUBERNETES_MAGIC.starts_with(rest) {
                            return Err(no_magic());
                        }
                        return Ok(at);
                    }
                    if !rest.starts_with(KUBERNETES_MAGIC) {
                        return Err(no_magic());
                    }
                    at += KUBERNETES_MAGIC.len();
                    self.stage = Stage::Envelope;
                }
                Stage::Envelope => {
                    let Some(head) = header(rest)? else {
                        return Ok(at);
                    };
                    if let (2, Some(len)) = (head.number, head.declared) {
                        // The list itself: read pod by pod, never whole.
                        check_kind(self.kind.as_deref().unwrap_or(""), "PodList")?;
                        at += head.header_len;
                        self.stage = Stage::List { left: len };
                        continue;
                    }
                    let Some((field, used)) = first_field(rest)? else {
                        return Ok(at);
                    };
                    self.envelope_field(&field)?;
                    at += used;
                }
                Stage::List { left: 0 } => self.stage = Stage::Trailer,
                Stage::List { left } => {
                    let window =
                        &rest[..rest.len().min(usize::try_from(left).unwrap_or(usize::MAX))];
                    let Some((field, used)) = first_field(window)? else {
                        if window.len() as u64 == left {
                            // All of the list is here and its last field still ends past it.
                            return Err(WireError::Truncated("pod list"));
                        }
                        return Ok(at);
                    };
                    match field.number {
                        1 => {
                            (self.read.resource_version, self.read.continue_token) =
                                list_meta(field.message()?)?;
                            self.meta_read = true;
                        }
                        2 => self.read.items.push(pod(field.message()?)?),
                        _ => {}
                    }
                    at += used;
                    self.stage = Stage::List {
                        left: left - used as u64,
                    };
                }
                Stage::Trailer => {
                    let Some((field, used)) = first_field(rest)? else {
                        return Ok(at);
                    };
                    self.envelope_field(&field)?;
                    at += used;
                }
            }
        }
    }

    fn envelope_field(&mut self, field: &Field<'_>) -> Result<(), WireError> {
        match field.number {
            1 => self.kind = Some(envelope_kind(field)?.to_string()),
            // A second list in one envelope is nothing the apiserver writes.
            2 => {
                field.bytes()?;
                return Err(WireError::Envelope(
                    "the envelope holds more than one object".into(),
                ));
            }
            3 | 4 => check_envelope_encoding(field)?,
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{failed_pod, list};
    use super::*;
    use crate::pod_read::PodRead;
    use crate::protobuf_wire::tests::{W, encode, kubernetes_body};

    fn read_in(pieces: &[&[u8]]) -> Result<PodListRead, WireError> {
        let mut stream = PodListStream::new();
        for piece in pieces {
            stream.push(piece)?;
        }
        stream.finish()
    }

    fn two_pods() -> Vec<u8> {
        let mut second = failed_pod();
        second[0] = (1, W::M(vec![(1, W::S("worker-2")), (3, W::S("grid"))]));
        list(vec![failed_pod(), second])
    }

    #[test]
    fn a_body_split_anywhere_reads_as_the_whole() {
        let body = two_pods();
        let whole = read_in(&[&body]).unwrap();
        assert_eq!(whole.items.len(), 2);
        assert_eq!(whole.items[1].name(), "worker-2");
        assert_eq!(whole.resource_version.as_deref(), Some("4711"));
        for cut in 0..=body.len() {
            let (a, b) = body.split_at(cut);
            assert_eq!(read_in(&[a, b]).unwrap(), whole, "split at {cut}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(read_in(&bytes).unwrap(), whole, "byte by byte");
        let sevens: Vec<&[u8]> = body.chunks(7).collect();
        assert_eq!(read_in(&sevens).unwrap(), whole, "seven at a time");
    }

    #[test]
    fn the_next_pages_token_is_known_before_the_first_pod() {
        let body = two_pods();
        let meta = encode(&[(
            1,
            W::M(vec![(1, W::S("")), (2, W::S("4711")), (3, W::S("next"))]),
        )]);
        // Magic, typeMeta, the list's header (tag and length), then its metadata.
        let meta_at = body
            .windows(meta.len())
            .position(|w| w == meta.as_slice())
            .expect("the list metadata is in the body");
        let mut stream = PodListStream::new();
        stream.push(&body[..meta_at + meta.len() - 1]).unwrap();
        assert_eq!(
            stream.continue_token(),
            None,
            "one byte of the metadata missing"
        );
        stream
            .push(&body[meta_at + meta.len() - 1..meta_at + meta.len()])
            .unwrap();
        assert_eq!(stream.continue_token(), Some(Some("next")));
        assert!(stream.read.items.is_empty(), "no pod has been read yet");
        stream.push(&body[meta_at + meta.len()..]).unwrap();
        assert_eq!(stream.finish().unwrap().items.len(), 2);

        // A list without metadata (not what the apiserver writes): known at its end, no token.
        let bare = kubernetes_body("PodList", encode(&[(2, W::M(failed_pod()))]));
        let mut stream = PodListStream::new();
        stream.push(&bare[..bare.len() - 4]).unwrap();
        assert_eq!(stream.continue_token(), Some(None));
        assert_eq!(stream.read.items.len(), 1);
    }

    #[test]
    fn a_body_cut_short_is_refused_unless_the_cut_ends_the_envelope_cleanly() {
        let body = two_pods();
        let whole = read_in(&[&body]).unwrap();
        // Where the envelope's fields end: after typeMeta, after the list, after
        // contentEncoding (contentType is last). A protobuf message may end there.
        let type_meta_end = KUBERNETES_MAGIC.len()
            + encode(&[(1, W::M(vec![(1, W::S("v1")), (2, W::S("PodList"))]))]).len();
        let list_end = body.len() - 4;
        for cut in 0..body.len() {
            let read = read_in(&[&body[..cut]]);
            match read {
                Err(_) => {}
                Ok(read) if cut == type_meta_end => assert_eq!(read.items, vec![]),
                Ok(read) if cut == list_end || cut == list_end + 2 => assert_eq!(read, whole),
                Ok(_) => panic!("a body cut at {cut} of {} was read", body.len()),
            }
        }
    }

    #[test]
    fn a_wrong_kind_is_refused_before_any_pod_is_read() {
        let mut stream = PodListStream::new();
        let status = kubernetes_body("Status", encode(&[(2, W::M(failed_pod()))]));
        // Only the envelope's head: the kind is known, the list not yet begun.
        let err = stream.push(&status[..24]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "expected a PodList, the apiserver sent a \"Status\""
        );
        assert_eq!(
            read_in(&[b"{\"kind\":\"PodList\"}"])
                .unwrap_err()
                .to_string(),
            "the body does not start with the Kubernetes protobuf magic"
        );
        assert_eq!(
            read_in(&[b"k8"]).unwrap_err().to_string(),
            "the body does not start with the Kubernetes protobuf magic"
        );
    }

    #[test]
    fn hostile_lengths_and_envelopes_are_refused_not_trusted() {
        // A list that claims far more bytes than come.
        let mut body = KUBERNETES_MAGIC.to_vec();
        body.extend(encode(&[(1, W::M(vec![(2, W::S("PodList"))]))]));
        body.extend([
            0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ]);
        body.extend(encode(&[(2, W::M(failed_pod()))]));
        assert_eq!(
            read_in(&[&body]).unwrap_err(),
            WireError::Truncated("pod list")
        );
        // A pod that claims to run past the end of its list.
        let mut inner = encode(&[(2, W::M(failed_pod()))]);
        inner.truncate(inner.len() - 5);
        assert_eq!(
            read_in(&[&kubernetes_body("PodList", inner)]).unwrap_err(),
            WireError::Truncated("pod list")
        );
        // A second object, and a compressed one.
        let mut twice = list(vec![failed_pod()]);
        twice.extend(encode(&[(2, W::M(failed_pod()))]));
        assert_eq!(
            read_in(&[&twice]).unwrap_err().to_string(),
            "the envelope holds more than one object"
        );
        let mut gzip = KUBERNETES_MAGIC.to_vec();
        gzip.extend(encode(&[
            (1, W::M(vec![(2, W::S("PodList"))])),
            (2, W::Raw(vec![])),
            (3, W::S("gzip")),
        ]));
        assert_eq!(
            read_in(&[&gzip]).unwrap_err().to_string(),
            "the object is wrapped as \"gzip\", which orb does not read"
        );
        // A varint that never ends, and a group.
        let mut endless = KUBERNETES_MAGIC.to_vec();
        endless.extend([0x80; 11]);
        assert_eq!(read_in(&[&endless]).unwrap_err(), WireError::VarintTooLong);
        let mut group = KUBERNETES_MAGIC.to_vec();
        group.push(0x0b);
        assert!(matches!(
            read_in(&[&group]).unwrap_err(),
            WireError::UnsupportedWireType { wire_type: 3, .. }
        ));
    }
}
