//! A reader of the protobuf wire format, enough for the few Kubernetes messages orb decodes
//! itself. Fields come in the order they were written; a field nobody asks for is passed
//! over by its length, never decoded, which is why a pod list read this way costs little
//! for its `managedFields`.

use thiserror::Error;

/// The body of a Kubernetes protobuf answer starts with these four bytes, then a
/// `runtime.Unknown` message wrapping the object.
pub(crate) const KUBERNETES_MAGIC: &[u8; 4] = b"k8s\0";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum WireError {
    #[error("the message ends inside a field ({0})")]
    Truncated(&'static str),
    #[error("a varint is longer than 10 bytes")]
    VarintTooLong,
    #[error("field {field} has wire type {wire_type}, which orb does not read")]
    UnsupportedWireType { field: u32, wire_type: u8 },
    #[error("field {field} should be {expected}")]
    WrongType { field: u32, expected: &'static str },
    #[error("field {field} is not UTF-8")]
    NotUtf8 { field: u32 },
    #[error("{0}")]
    Envelope(String),
}

/// The fields of one message, in the order they were written.
#[derive(Debug, Clone)]
pub(crate) struct Fields<'a> {
    rest: &'a [u8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Varint(u64),
    /// Length-delimited: a string, bytes, an embedded message or a packed array.
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value; nothing orb reads has one.
    Fixed,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Field<'a> {
    pub number: u32,
    pub value: Value<'a>,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(message: &'a [u8]) -> Self {
        Self { rest: message }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut value = 0u64;
        for (i, byte) in self.rest.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.rest = &self.rest[i + 1..];
                return Ok(value);
            }
        }
        if self.rest.len() < 10 {
            Err(WireError::Truncated("varint"))
        } else {
            Err(WireError::VarintTooLong)
        }
    }

    fn take(&mut self, len: u64, what: &'static str) -> Result<&'a [u8], WireError> {
        let len = usize::try_from(len).map_err(|_| WireError::Truncated(what))?;
        if len > self.rest.len() {
            return Err(WireError::Truncated(what));
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn field(&mut self) -> Result<Field<'a>, WireError> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| WireError::VarintTooLong)?;
        let wire_type = (key & 7) as u8;
        let value = match wire_type {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8, "fixed64")?;
                Value::Fixed
            }
            2 => {
                let len = self.varint()?;
                Value::Bytes(self.take(len, "length-delimited field")?)
            }
            5 => {
                self.take(4, "fixed32")?;
                Value::Fixed
            }
            // 3 and 4 are the deprecated groups, which Kubernetes never writes.
            _ => {
                return Err(WireError::UnsupportedWireType {
                    field: number,
                    wire_type,
                });
            }
        };
        Ok(Field { number, value })
    }
}

/// How a field begins: its number, the bytes of its key (and length), and for a
/// length-delimited field the length it declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub number: u32,
    pub header_len: usize,
    pub declared: Option<u64>,
}

/// The header of the field `buf` starts with, `None` when `buf` ends inside it: for a
/// message that arrives in pieces, where "not yet" and "broken" must be told apart.
pub(crate) fn header(buf: &[u8]) -> Result<Option<Header>, WireError> {
    let mut fields = Fields::new(buf);
    let key = match fields.varint() {
        Err(WireError::Truncated(_)) => return Ok(None),
        other => other?,
    };
    let number = u32::try_from(key >> 3).map_err(|_| WireError::VarintTooLong)?;
    let wire_type = (key & 7) as u8;
    let declared = if wire_type == 2 {
        match fields.varint() {
            Err(WireError::Truncated(_)) => return Ok(None),
            other => Some(other?),
        }
    } else {
        None
    };
    Ok(Some(Header {
        number,
        header_len: buf.len() - fields.rest.len(),
        declared,
    }))
}

/// The first field of `buf` and how many bytes it takes, `None` when `buf` ends before the
/// field does (more is to come); a field that cannot be framed at all is an error.
pub(crate) fn first_field(buf: &[u8]) -> Result<Option<(Field<'_>, usize)>, WireError> {
    let mut fields = Fields::new(buf);
    match fields.field() {
        Ok(field) => Ok(Some((field, buf.len() - fields.rest.len()))),
        Err(WireError::Truncated(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            // One error ends the message: what follows cannot be framed.
            self.rest = &[];
        }
        Some(field)
    }
}

impl<'a> Field<'a> {
    pub(crate) fn bytes(&self) -> Result<&'a [u8], WireError> {
        match self.value {
            Value::Bytes(b) => Ok(b),
            _ => Err(self.wrong("length-delimited")),
        }
    }

    pub(crate) fn message(&self) -> Result<Fields<'a>, WireError> {
        self.bytes().map(Fields::new)
    }

    pub(crate) fn str(&self) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| WireError::NotUtf8 { field: self.number })
    }

    /// The string, `None` when empty: Kubernetes writes every plain string field to
    /// protobuf, empty or not, where its JSON leaves the empty ones out.
    pub(crate) fn non_empty(&self) -> Result<Option<String>, WireError> {
        let s = self.str()?;
        Ok((!s.is_empty()).then(|| s.to_string()))
    }

    pub(crate) fn string(&self) -> Result<String, WireError> {
        self.str().map(str::to_string)
    }

    pub(crate) fn varint(&self) -> Result<u64, WireError> {
        match self.value {
            Value::Varint(v) => Ok(v),
            _ => Err(self.wrong("a varint")),
        }
    }

    /// An `int64` (negative ones are written as ten-byte two's complement).
    pub(crate) fn int64(&self) -> Result<i64, WireError> {
        self.varint().map(|v| v as i64)
    }

    /// An `int32`: negative ones are sign-extended to 64 bits on the wire.
    pub(crate) fn int32(&self) -> Result<i32, WireError> {
        self.varint().map(|v| v as i64 as i32)
    }

    pub(crate) fn bool(&self) -> Result<bool, WireError> {
        self.varint().map(|v| v != 0)
    }

    fn wrong(&self, expected: &'static str) -> WireError {
        WireError::WrongType {
            field: self.number,
            expected,
        }
    }
}

/// A Kubernetes protobuf body: the object's own bytes, after checking the magic, that the
/// object is an `expected_kind` and that it is not compressed or in another encoding.
pub(crate) fn unwrap_kubernetes<'a>(
    body: &'a [u8],
    expected_kind: &str,
) -> Result<&'a [u8], WireError> {
    let message = strip_magic(body)?;
    let (mut kind, mut raw) = ("", &[][..]);
    for field in Fields::new(message) {
        let field = field?;
        match field.number {
            1 => kind = envelope_kind(&field)?,
            2 => raw = field.bytes()?,
            3 | 4 => check_envelope_encoding(&field)?,
            _ => {}
        }
    }
    check_kind(kind, expected_kind)?;
    Ok(raw)
}

/// The `runtime.Unknown` message after the magic.
pub(crate) fn strip_magic(body: &[u8]) -> Result<&[u8], WireError> {
    body.strip_prefix(KUBERNETES_MAGIC).ok_or_else(no_magic)
}

pub(crate) fn no_magic() -> WireError {
    WireError::Envelope("the body does not start with the Kubernetes protobuf magic".into())
}

/// The kind the envelope's `typeMeta` (field 1) names.
pub(crate) fn envelope_kind<'a>(type_meta: &Field<'a>) -> Result<&'a str, WireError> {
    let mut kind = "";
    for meta in type_meta.message()? {
        let meta = meta?;
        if meta.number == 2 {
            kind = meta.str()?;
        }
    }
    Ok(kind)
}

/// The envelope's `contentEncoding` or `contentType` (fields 3 and 4) must be empty or plain
/// protobuf.
pub(crate) fn check_envelope_encoding(field: &Field<'_>) -> Result<(), WireError> {
    let value = field.str()?;
    if !value.is_empty() && value != "application/vnd.kubernetes.protobuf" {
        return Err(WireError::Envelope(format!(
            "the object is wrapped as {value:?}, which orb does not read"
        )));
    }
    Ok(())
}

pub(crate) fn check_kind(kind: &str, expected_kind: &str) -> Result<(), WireError> {
    if kind != expected_kind {
        return Err(WireError::Envelope(format!(
            "expected a {expected_kind}, the apiserver sent a {kind:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes protobuf for the tests: a message is a list of `(field, value)`.
    pub(crate) enum W {
        V(u64),
        S(&'static str),
        M(Vec<(u32, W)>),
        Raw(Vec<u8>),
    }

    pub(crate) fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    pub(crate) fn encode(fields: &[(u32, W)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (number, value) in fields {
            match value {
                W::V(v) => {
                    varint(u64::from(*number) << 3, &mut out);
                    varint(*v, &mut out);
                }
                W::S(s) => bytes_field(*number, s.as_bytes(), &mut out),
                W::M(m) => bytes_field(*number, &encode(m), &mut out),
                W::Raw(b) => bytes_field(*number, b, &mut out),
            }
        }
        out
    }

    fn bytes_field(number: u32, b: &[u8], out: &mut Vec<u8>) {
        varint((u64::from(number) << 3) | 2, out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    /// `object` wrapped as the apiserver sends it.
    pub(crate) fn kubernetes_body(kind: &'static str, object: Vec<u8>) -> Vec<u8> {
        let mut body = KUBERNETES_MAGIC.to_vec();
        body.extend(encode(&[
            (1, W::M(vec![(1, W::S("v1")), (2, W::S(kind))])),
            (2, W::Raw(object)),
            (3, W::S("")),
            (4, W::S("")),
        ]));
        body
    }

    fn all(message: &[u8]) -> Result<Vec<(u32, Value<'_>)>, WireError> {
        Fields::new(message)
            .map(|f| f.map(|f| (f.number, f.value)))
            .collect()
    }

    #[test]
    fn reads_varints_strings_and_skips_fixed_values() {
        let mut message = encode(&[(1, W::V(300)), (2, W::S("pod"))]);
        // field 3, fixed64; field 4, fixed32
        message.extend([0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x25, 1, 2, 3, 4]);
        assert_eq!(
            all(&message).unwrap(),
            vec![
                (1, Value::Varint(300)),
                (2, Value::Bytes(b"pod")),
                (3, Value::Fixed),
                (4, Value::Fixed)
            ]
        );
    }

    #[test]
    fn negative_int32_and_int64_read_back() {
        let message = encode(&[(1, W::V(-7i64 as u64)), (2, W::V(-1i32 as i64 as u64))]);
        let fields: Vec<Field<'_>> = Fields::new(&message).map(Result::unwrap).collect();
        assert_eq!(fields[0].int64().unwrap(), -7);
        assert_eq!(fields[1].int32().unwrap(), -1);
    }

    #[test]
    fn malformed_input_is_an_error_never_a_panic() {
        let cases: Vec<(&[u8], WireError)> = vec![
            (&[0x08], WireError::Truncated("varint")),
            (&[0x08, 0x80], WireError::Truncated("varint")),
            (
                &[0x12, 5, b'a'],
                WireError::Truncated("length-delimited field"),
            ),
            (&[0x19, 1, 2], WireError::Truncated("fixed64")),
            (&[0x25, 1], WireError::Truncated("fixed32")),
            (
                &[0x0b],
                WireError::UnsupportedWireType {
                    field: 1,
                    wire_type: 3,
                },
            ),
            (
                &[
                    0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                ],
                WireError::VarintTooLong,
            ),
            // a length that does not fit in memory
            (
                &[
                    0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                ],
                WireError::Truncated("length-delimited field"),
            ),
        ];
        for (input, expected) in cases {
            let mut fields = Fields::new(input);
            assert_eq!(fields.next().unwrap().unwrap_err(), expected, "{input:?}");
            assert!(fields.next().is_none(), "an error ends the message");
        }
    }

    #[test]
    fn a_field_read_as_the_wrong_type_says_which() {
        let message = encode(&[(6, W::V(1))]);
        let field = Fields::new(&message).next().unwrap().unwrap();
        assert_eq!(
            field.str().unwrap_err().to_string(),
            "field 6 should be length-delimited"
        );
        let message = encode(&[(7, W::Raw(vec![0xff, 0xfe]))]);
        let field = Fields::new(&message).next().unwrap().unwrap();
        assert_eq!(field.str().unwrap_err(), WireError::NotUtf8 { field: 7 });
        assert!(field.varint().is_err());
    }

    #[test]
    fn the_kubernetes_envelope_gives_kind_and_object() {
        let body = kubernetes_body("PodList", vec![1, 2, 3]);
        assert_eq!(
            unwrap_kubernetes(&body, "PodList").unwrap(),
            &[1u8, 2, 3][..]
        );
        assert_eq!(
            unwrap_kubernetes(&body, "Status").unwrap_err().to_string(),
            "expected a Status, the apiserver sent a \"PodList\""
        );
        assert!(unwrap_kubernetes(b"{\"kind\":\"PodList\"}", "PodList").is_err());
        let mut gzip = KUBERNETES_MAGIC.to_vec();
        gzip.extend(encode(&[(2, W::Raw(vec![1])), (3, W::S("gzip"))]));
        assert_eq!(
            unwrap_kubernetes(&gzip, "PodList").unwrap_err().to_string(),
            "the object is wrapped as \"gzip\", which orb does not read"
        );
    }
}
