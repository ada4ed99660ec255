//! Row ↔ domain conversions. Timestamps are epoch microseconds; lists and maps are JSON text.

use jiff::Timestamp;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::StoreError;

/// Where a [`RowReader`] takes column values from: a row sqlx fetched, or a row read on the
/// calling thread ([`crate::SameThreadReader`]). Both decode through the same
/// [`RowReader`] calls, so a row reads the same whichever way it came.
pub(crate) trait ColumnSource {
    fn text(&self, column: &str) -> Result<String, String>;
    fn opt_text(&self, column: &str) -> Result<Option<String>, String>;
    fn int(&self, column: &str) -> Result<i64, String>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>, String>;
}

impl ColumnSource for AnyRow {
    fn text(&self, column: &str) -> Result<String, String> {
        self.try_get(column).map_err(|e| e.to_string())
    }

    fn opt_text(&self, column: &str) -> Result<Option<String>, String> {
        self.try_get(column).map_err(|e| e.to_string())
    }

    fn int(&self, column: &str) -> Result<i64, String> {
        self.try_get(column).map_err(|e| e.to_string())
    }

    fn opt_int(&self, column: &str) -> Result<Option<i64>, String> {
        self.try_get(column).map_err(|e| e.to_string())
    }
}

impl ColumnSource for rusqlite::Row<'_> {
    fn text(&self, column: &str) -> Result<String, String> {
        self.get(column).map_err(|e| e.to_string())
    }

    fn opt_text(&self, column: &str) -> Result<Option<String>, String> {
        self.get(column).map_err(|e| e.to_string())
    }

    fn int(&self, column: &str) -> Result<i64, String> {
        self.get(column).map_err(|e| e.to_string())
    }

    fn opt_int(&self, column: &str) -> Result<Option<i64>, String> {
        self.get(column).map_err(|e| e.to_string())
    }
}

pub(crate) fn micros(t: Timestamp) -> i64 {
    t.as_microsecond()
}

pub(crate) fn opt_micros(t: Option<Timestamp>) -> Option<i64> {
    t.map(micros)
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

/// Reads columns of one row, turning every decoding problem into [`StoreError::Corrupt`].
pub(crate) struct RowReader<'r, R: ColumnSource + ?Sized> {
    pub row: &'r R,
    pub entity: &'static str,
    pub id: String,
}

impl<'r, R: ColumnSource + ?Sized> RowReader<'r, R> {
    pub fn new(row: &'r R, entity: &'static str, id_column: &str) -> Self {
        let id = row.text(id_column).unwrap_or_default();
        Self { row, entity, id }
    }

    fn corrupt(&self, column: &str, message: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt {
            entity: self.entity,
            id: self.id.clone(),
            message: format!("column {column}: {message}"),
        }
    }

    pub fn text(&self, column: &str) -> Result<String, StoreError> {
        self.row.text(column).map_err(|e| self.corrupt(column, e))
    }

    pub fn opt_text(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.row
            .opt_text(column)
            .map_err(|e| self.corrupt(column, e))
    }

    pub fn int(&self, column: &str) -> Result<i64, StoreError> {
        self.row.int(column).map_err(|e| self.corrupt(column, e))
    }

    pub fn opt_int(&self, column: &str) -> Result<Option<i64>, StoreError> {
        self.row
            .opt_int(column)
            .map_err(|e| self.corrupt(column, e))
    }

    pub fn count(&self, column: &str) -> Result<u32, StoreError> {
        let value = self.int(column)?;
        u32::try_from(value).map_err(|_| self.corrupt(column, format!("{value} is out of range")))
    }

    pub fn time(&self, column: &str) -> Result<Timestamp, StoreError> {
        let value = self.int(column)?;
        Timestamp::from_microsecond(value).map_err(|e| self.corrupt(column, e))
    }

    pub fn opt_time(&self, column: &str) -> Result<Option<Timestamp>, StoreError> {
        self.opt_int(column)?
            .map(|v| Timestamp::from_microsecond(v).map_err(|e| self.corrupt(column, e)))
            .transpose()
    }

    pub fn json<T: DeserializeOwned>(&self, column: &str) -> Result<T, StoreError> {
        let text = self.text(column)?;
        serde_json::from_str(&text).map_err(|e| self.corrupt(column, e))
    }

    /// A nullable column holding a value's canonical text; text it does not know is corrupt.
    pub fn opt_parsed<T: std::str::FromStr<Err = String>>(
        &self,
        column: &str,
    ) -> Result<Option<T>, StoreError> {
        self.opt_text(column)?
            .map(|text| text.parse().map_err(|e: String| self.corrupt(column, e)))
            .transpose()
    }

    pub fn parsed<T: std::str::FromStr<Err = String>>(
        &self,
        column: &str,
    ) -> Result<T, StoreError> {
        let text = self.text(column)?;
        text.parse().map_err(|e: String| self.corrupt(column, e))
    }
}
