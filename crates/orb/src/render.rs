//! Turning replies into text: pretty JSON, YAML or an aligned table.

use serde::Serialize;

use crate::cli::OutputFormat;
use crate::failure::{CliResult, Failure};

/// A simple text table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    pub headers: Vec<&'static str>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: Vec<&'static str>) -> Self {
        Self {
            headers,
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(cell.chars().count());
                }
            }
        }
        let line = |cells: Vec<&str>| {
            let text: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<width$}", width = widths.get(i).copied().unwrap_or(0)))
                .collect();
            text.join("  ").trim_end().to_string()
        };
        let mut out = vec![line(self.headers.clone())];
        for row in &self.rows {
            out.push(line(row.iter().map(String::as_str).collect()));
        }
        out.join("\n") + "\n"
    }
}

/// `value` as pretty JSON and a line break. (HostFactory's getRequestStatus reply, megabytes
/// at thousands of machines, is written by `StatusReply::to_pretty_json` instead.)
pub fn json<T: Serialize + ?Sized>(value: &T) -> CliResult<String> {
    let failed = |e: &dyn std::fmt::Display| {
        Failure::generic(format!("cannot render the reply as JSON: {e}"))
    };
    let mut out = Vec::with_capacity(128);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, Pretty::default());
    value.serialize(&mut serializer).map_err(|e| failed(&e))?;
    out.push(b'\n');
    String::from_utf8(out).map_err(|e| failed(&e))
}

/// A line break and the deepest indentation written in one piece; deeper lines fall back
/// to two spaces a level.
const BREAK: &[u8] = b"\n                                                                ";

/// serde_json's pretty printer (two spaces a level), writing each line break with its
/// indentation in one piece where serde_json's writes the indentation two spaces at a time
/// (five writes for each line of a machine entry; it was a quarter of rendering a
/// 5,000-machine status before that reply got a writer of its own, and still serves machine
/// lists and every other reply). Byte for byte `serde_json::to_string_pretty`; the test
/// `renders_byte_for_byte_as_serde_json_pretty` holds it to that.
#[derive(Debug, Default)]
struct Pretty {
    depth: usize,
    has_value: bool,
}

impl Pretty {
    fn line<W: ?Sized + std::io::Write>(&self, writer: &mut W) -> std::io::Result<()> {
        match BREAK.get(..1 + 2 * self.depth) {
            Some(piece) => writer.write_all(piece),
            None => {
                writer.write_all(b"\n")?;
                (0..self.depth).try_for_each(|_| writer.write_all(b"  "))
            }
        }
    }

    /// `[` or `{`: one level deeper, nothing in it yet.
    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(bracket)
    }

    /// `]` or `}`, on a line of its own unless the array or object is empty.
    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.line(writer)?;
        }
        writer.write_all(bracket)
    }

    /// Before an array value or an object key: a comma after the first, then a new line.
    fn next<W: ?Sized + std::io::Write>(&self, writer: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            writer.write_all(b",")?;
        }
        self.line(writer)
    }
}

impl serde_json::ser::Formatter for Pretty {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.next(writer, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.next(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Renders `value` as asked; `table` is only built for table output.
pub fn render<T: Serialize>(
    value: &T,
    format: OutputFormat,
    table: impl FnOnce() -> Table,
) -> CliResult<String> {
    match format {
        OutputFormat::Json => json(value),
        OutputFormat::Yaml => serde_saphyr::to_string(value)
            .map_err(|e| Failure::generic(format!("cannot render the reply as YAML: {e}"))),
        OutputFormat::Table => Ok(table().render()),
    }
}

pub fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_byte_for_byte_as_serde_json_pretty() {
        // Nesting past the one-piece indentation (32 levels) included.
        let mut deep = serde_json::json!("bottom");
        for i in 0..40 {
            deep = if i % 2 == 0 {
                serde_json::json!([deep, 1])
            } else {
                serde_json::json!({"k": deep, "e": {}})
            };
        }
        let values = [
            serde_json::json!(null),
            serde_json::json!([]),
            serde_json::json!({}),
            serde_json::json!([[]]),
            serde_json::json!([{}, [], [[]], {"a": []}]),
            serde_json::json!({"a": {"b": {}}, "c": [1, 2.5, -3, "x\"y\n\u{1}é✓"], "d": null}),
            serde_json::json!({"requests": [{"requestId": "req-1", "machines": [
                {"machineId": "m-0", "launchtime": 1_796_489_842, "privateIpAddress": null,
                 "instanceTags": "a=b;c=d"}
            ]}]}),
            deep,
        ];
        for value in values {
            let ours = json(&value).unwrap();
            let theirs = serde_json::to_string_pretty(&value).unwrap() + "\n";
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(vec!["ID", "STATUS"]);
        t.row(vec!["req-1".into(), "complete".into()]);
        t.row(vec!["req-long-id".into(), "failed".into()]);
        assert_eq!(
            t.render(),
            "ID           STATUS\nreq-1        complete\nreq-long-id  failed\n"
        );
    }

    #[test]
    fn yaml_and_json_render_the_same_data() {
        let value = serde_json::json!({"a": 1});
        assert_eq!(
            render(&value, OutputFormat::Json, Table::default).unwrap(),
            "{\n  \"a\": 1\n}\n"
        );
        assert!(
            render(&value, OutputFormat::Yaml, Table::default)
                .unwrap()
                .contains("a: 1")
        );
    }
}
