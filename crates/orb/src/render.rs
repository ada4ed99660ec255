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

pub fn json<T: Serialize + ?Sized>(value: &T) -> CliResult<String> {
    json_sized(value, 128)
}

/// [`json`] into a buffer of `capacity` bytes to start with: a reply of megabytes (the
/// status of thousands of machines) then grows without being copied over and over.
pub fn json_sized<T: Serialize + ?Sized>(value: &T, capacity: usize) -> CliResult<String> {
    let failed = |e: &dyn std::fmt::Display| {
        Failure::generic(format!("cannot render the reply as JSON: {e}"))
    };
    let mut out = Vec::with_capacity(capacity);
    serde_json::to_writer_pretty(&mut out, value).map_err(|e| failed(&e))?;
    out.push(b'\n');
    String::from_utf8(out).map_err(|e| failed(&e))
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
