//! The getRequestStatus reply written as JSON by hand, byte for byte what
//! `serde_json::to_string_pretty` writes for [`StatusReply`]: at 5,000 machines serde_json
//! spent a third of a status read through `orb serve` escaping strings, every one of them
//! scanned a byte at a time, the sixty thousand constant keys included. Here keys are
//! written as they are, and a value is checked for anything to escape in one pass the
//! compiler vectorises; the rare value that needs escaping goes through serde_json.
use super::output::{InstanceTags, MachineEntry, RequestStatusEntry, StatusReply, machine_entry};
use crate::machine::Machine;
use crate::request::RequestType;
use crate::template::wire::tags_to_string;

/// Bytes a machine takes in the reply, about; a little more, so a buffer is not copied.
const MACHINE_BYTES: usize = 1024;

impl StatusReply<'_> {
    /// The reply as pretty JSON (two spaces a level, no final line break), exactly as
    /// `serde_json::to_string_pretty(self)` renders it.
    pub fn to_pretty_json(&self) -> String {
        // About 700 bytes a machine; room for a little more, so the buffer is not copied.
        let size = 64
            + self
                .requests
                .iter()
                .map(|r| {
                    let written = r.written_machines.map_or(0, str::len);
                    256 + r.message.len() + written + MACHINE_BYTES * r.machines.len()
                })
                .sum::<usize>();
        let mut out = Writer(String::with_capacity(size));
        out.0.push_str("{\n  \"requests\": ");
        out.list("", &self.requests, REQUEST, TOP_FIELD, Writer::request);
        out.0.push_str("\n}");
        out.0
    }
}

/// `machines` as the items of a getRequestStatus reply's `machines` array for a request of
/// `request_type`, each on its line, without the brackets: what
/// [`RequestStatusEntry::written_machines`] takes. Empty for no machines.
pub fn machine_items(request_type: RequestType, machines: &[Machine]) -> String {
    let mut out = Writer(String::with_capacity(MACHINE_BYTES * machines.len()));
    let entries = machines.iter().map(|m| machine_entry(request_type, m));
    out.items(entries, MACHINE, true, |out, entry| out.machine(&entry));
    out.0
}

/// A line break and the indentation of: the reply's field, a request, a request's fields,
/// a machine, a machine's fields.
const TOP_FIELD: &str = "\n  ";
const REQUEST: &str = "\n    ";
const REQUEST_FIELD: &str = "\n      ";
const MACHINE: &str = "\n        ";
const MACHINE_FIELD: &str = "\n          ";

struct Writer(String);

impl Writer {
    fn request(&mut self, r: &RequestStatusEntry<'_>) {
        self.0.push('{');
        self.key(REQUEST_FIELD, true, "requestId");
        self.str(r.request_id);
        self.key(REQUEST_FIELD, false, "status");
        self.str(r.status);
        self.key(REQUEST_FIELD, false, "message");
        self.str(&r.message);
        self.key(REQUEST_FIELD, false, "machines");
        let written = r.written_machines.unwrap_or_default();
        self.list(
            written,
            &r.machines,
            MACHINE,
            REQUEST_FIELD,
            Writer::machine,
        );
        self.0.push_str(REQUEST);
        self.0.push('}');
    }

    /// A list: the items `written` before (as [`Writer::items`] writes them), then `items`,
    /// each on a line of its own at `item`, the closing bracket at `close`; empty, `[]`.
    fn list<T>(
        &mut self,
        written: &str,
        items: &[T],
        item: &str,
        close: &str,
        write: fn(&mut Self, &T),
    ) {
        if written.is_empty() && items.is_empty() {
            self.0.push_str("[]");
            return;
        }
        self.0.push('[');
        self.0.push_str(written);
        self.items(items, item, written.is_empty(), write);
        self.0.push_str(close);
        self.0.push(']');
    }

    /// A list's items, each on a line of its own at `item` after the comma that ends the one
    /// before (none before the list's `first`).
    fn items<T>(
        &mut self,
        items: impl IntoIterator<Item = T>,
        item: &str,
        first: bool,
        write: impl Fn(&mut Self, T),
    ) {
        for (i, value) in items.into_iter().enumerate() {
            if i > 0 || !first {
                self.0.push(',');
            }
            self.0.push_str(item);
            write(self, value);
        }
    }

    fn machine(&mut self, m: &MachineEntry<'_>) {
        self.0.push('{');
        self.key(MACHINE_FIELD, true, "machineId");
        self.str(m.machine_id);
        self.key(MACHINE_FIELD, false, "name");
        self.str(m.name);
        self.key(MACHINE_FIELD, false, "result");
        self.str(m.result);
        self.key(MACHINE_FIELD, false, "status");
        self.str(m.status);
        self.key(MACHINE_FIELD, false, "privateIpAddress");
        self.opt_str(m.private_ip_address);
        self.key(MACHINE_FIELD, false, "publicIpAddress");
        self.opt_str(m.public_ip_address);
        self.key(MACHINE_FIELD, false, "launchtime");
        // serde_json writes integers with itoa too; `write!` went through core::fmt.
        self.0.push_str(itoa::Buffer::new().format(m.launchtime));
        self.key(MACHINE_FIELD, false, "message");
        self.str(m.message);
        self.key(MACHINE_FIELD, false, "cloudHostId");
        self.opt_str(m.cloud_host_id);
        self.skipped_if_none("instanceType", m.instance_type);
        self.skipped_if_none("priceType", m.price_type);
        self.key(MACHINE_FIELD, false, "instanceTags");
        self.tags(m.instance_tags);
        self.skipped_if_none("requestId", m.request_id);
        self.skipped_if_none("returnRequestId", m.return_request_id);
        self.0.push_str(MACHINE);
        self.0.push('}');
    }

    /// A machine's field that serde leaves out when it is `None`
    /// (`skip_serializing_if = "Option::is_none"`), never its first.
    fn skipped_if_none(&mut self, key: &str, value: Option<&str>) {
        if let Some(value) = value {
            self.key(MACHINE_FIELD, false, key);
            self.str(value);
        }
    }

    /// A field's key, after the comma that ends the field before it (unless `first`).
    /// Keys are constants that need no escaping.
    fn key(&mut self, indent: &str, first: bool, key: &str) {
        if !first {
            self.0.push(',');
        }
        self.0.push_str(indent);
        self.0.push('"');
        self.0.push_str(key);
        self.0.push_str("\": ");
    }

    fn str(&mut self, value: &str) {
        if needs_no_escape(value) {
            self.0.push('"');
            self.0.push_str(value);
            self.0.push('"');
        } else {
            // serde_json's own escaping, so the two renderings cannot drift apart.
            let escaped = serde_json::to_string(value).unwrap_or_default();
            self.0.push_str(&escaped);
        }
    }

    /// `key=value` pairs joined by `;`, as one string: written pair by pair, checked in one
    /// pass once written, and written again through [`Writer::str`] in the rare case a key or
    /// value needs escaping (`;` and `=` never do).
    fn tags(&mut self, tags: InstanceTags<'_>) {
        let start = self.0.len();
        self.0.push('"');
        for (i, (key, value)) in tags.0.iter().enumerate() {
            if i > 0 {
                self.0.push(';');
            }
            self.0.push_str(key);
            self.0.push('=');
            self.0.push_str(value);
        }
        let clean = needs_no_escape(&self.0[start + 1..]);
        self.0.push('"');
        if !clean {
            self.0.truncate(start);
            self.str(&tags_to_string(tags.0));
        }
    }

    fn opt_str(&mut self, value: Option<&str>) {
        match value {
            Some(value) => self.str(value),
            None => self.0.push_str("null"),
        }
    }
}

/// Whether JSON writes `value` as it is: no quote, no backslash, no control character
/// (serde_json escapes nothing else). Checked without stopping early, so the loop is
/// vectorised; most values are names and addresses a few dozen bytes long.
fn needs_no_escape(value: &str) -> bool {
    value.bytes().fold(true, |clean, b| {
        clean & (b >= 0x20) & (b != b'"') & (b != b'\\')
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;
    use std::collections::BTreeMap;

    /// Strings with every kind of character JSON treats specially, and some it does not.
    const AWKWARD: &[&str] = &[
        "",
        "plain",
        "orb-fa84b14c3f4d43f181b8-0000",
        "quote \" inside",
        "back\\slash",
        "line\nbreak\r\ttab",
        "\u{8}\u{c}\u{1}\u{1f}\u{0}",
        "del \u{7f} stays",
        "é ✓ 漢字 😀",
        "slash / is not escaped",
        "</script>",
        "ends with backslash \\",
    ];

    /// Tag maps: none, and awkward keys with awkward values, one pair or three.
    static TAGS: std::sync::LazyLock<Vec<BTreeMap<String, String>>> =
        std::sync::LazyLock::new(|| {
            let mut maps = vec![BTreeMap::new()];
            for (i, key) in AWKWARD.iter().enumerate() {
                let pair = |j: usize| {
                    (
                        AWKWARD[j % AWKWARD.len()].to_string(),
                        AWKWARD[(j + 4) % AWKWARD.len()].to_string(),
                    )
                };
                maps.push(BTreeMap::from([(
                    key.to_string(),
                    AWKWARD[(i + 1) % AWKWARD.len()].to_string(),
                )]));
                maps.push(BTreeMap::from([
                    pair(i),
                    pair(i + 2),
                    ("orb.io/managed".into(), "true".into()),
                ]));
            }
            maps
        });

    fn machine<'a>(i: usize, text: &'a str) -> MachineEntry<'a> {
        MachineEntry {
            machine_id: AWKWARD[i % AWKWARD.len()],
            name: text,
            result: ["succeed", "fail", "executing"][i % 3],
            status: "running",
            private_ip_address: i.is_multiple_of(2).then_some("10.0.0.1"),
            public_ip_address: i.is_multiple_of(3).then_some(text),
            launchtime: [0, 1_767_225_600, -5, i64::MAX, i64::MIN][i % 5],
            message: AWKWARD[(i + 3) % AWKWARD.len()],
            cloud_host_id: (!i.is_multiple_of(4)).then_some(text),
            instance_type: (i % 2 == 1).then_some("k8s/Pod"),
            price_type: i.is_multiple_of(5).then_some(text),
            instance_tags: InstanceTags(&TAGS[(i + 5) % TAGS.len()]),
            request_id: (i % 6 == 1).then_some("req-1"),
            return_request_id: (i % 7 == 2).then_some(text),
        }
    }

    fn reply(requests: usize, machines: usize) -> StatusReply<'static> {
        StatusReply {
            requests: (0..requests)
                .map(|r| RequestStatusEntry {
                    request_id: AWKWARD[(r + 2) % AWKWARD.len()],
                    status: "running",
                    message: if r.is_multiple_of(2) {
                        Cow::Borrowed(AWKWARD[r % AWKWARD.len()])
                    } else {
                        Cow::Owned(format!("owned {r}: \"{}\"", AWKWARD[r % AWKWARD.len()]))
                    },
                    written_machines: None,
                    machines: (0..machines * (r % 3))
                        .map(|i| machine(i + r, AWKWARD[(i * 7 + r) % AWKWARD.len()]))
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn renders_byte_for_byte_as_serde_json_pretty() {
        for (requests, machines) in [(0, 0), (1, 0), (1, 1), (3, 1), (4, 30), (7, 13)] {
            let reply = reply(requests, machines);
            assert_eq!(
                reply.to_pretty_json(),
                serde_json::to_string_pretty(&reply).unwrap(),
                "{requests} requests, up to {machines} machines each"
            );
        }
    }

    #[test]
    fn only_quotes_backslashes_and_control_characters_need_escaping() {
        for s in AWKWARD {
            let serde_writes_it_as_is = serde_json::to_string(s).unwrap() == format!("\"{s}\"");
            assert_eq!(needs_no_escape(s), serde_writes_it_as_is, "{s:?}");
        }
    }
}
