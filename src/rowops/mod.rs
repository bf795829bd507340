//! Row operations: upserts and deletes matched by key (the table's identifier fields).
//!
//! Each message carries an operation (`insert`, `upsert` or `delete`). An upsert
//! replaces every row with its key; a delete removes them; an insert appends. Within
//! one commit the operations apply in order — in a call, message order; across the calls
//! of a commit group, the order their rows reached the committer — so the last operation
//! per key wins, and a commit writes each surviving row once.
//!
//! [`keys`] turns key columns into comparable byte rows (typed: `1` and `1.0` for a long
//! key, or two spellings of one timestamp, are one key once shredded); [`resolve`] applies
//! the order.

pub mod conform;
pub mod cow;
pub mod deletion_vectors;
pub mod fingerprints;
pub mod keys;
pub mod lookup;
pub mod positional;
pub mod removal;
pub mod removed;
pub mod resolve;

pub use keys::KeyColumns;

/// What a message does to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOp {
    Insert,
    Upsert,
    Delete,
}

impl RowOp {
    /// The operation a message names; no name (or an empty one) is an insert.
    pub fn parse(name: Option<&str>) -> Result<RowOp, String> {
        // The names as hosts send them, first: this runs several times for every message.
        match name {
            None | Some("") | Some("insert") => return Ok(RowOp::Insert),
            Some("upsert") => return Ok(RowOp::Upsert),
            Some("delete") => return Ok(RowOp::Delete),
            Some(_) => {}
        }
        let Some(name) = name.map(str::trim).filter(|n| !n.is_empty()) else {
            return Ok(RowOp::Insert);
        };
        if name.eq_ignore_ascii_case("insert") {
            Ok(RowOp::Insert)
        } else if name.eq_ignore_ascii_case("upsert") {
            Ok(RowOp::Upsert)
        } else if name.eq_ignore_ascii_case("delete") {
            Ok(RowOp::Delete)
        } else {
            Err(format!(
                "row_operation {name:?} is not one of insert, upsert, delete"
            ))
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RowOp::Insert => "insert",
            RowOp::Upsert => "upsert",
            RowOp::Delete => "delete",
        }
    }

    /// Whether the message's row goes into a data file (a delete only needs its key).
    pub fn writes_row(self) -> bool {
        self != RowOp::Delete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_parse_case_insensitively_and_default_to_insert() {
        assert_eq!(RowOp::parse(None), Ok(RowOp::Insert));
        assert_eq!(RowOp::parse(Some("")), Ok(RowOp::Insert));
        assert_eq!(RowOp::parse(Some("UPSERT")), Ok(RowOp::Upsert));
        assert_eq!(RowOp::parse(Some(" delete ")), Ok(RowOp::Delete));
        assert!(
            RowOp::parse(Some("merge"))
                .unwrap_err()
                .contains("\"merge\"")
        );
    }
}
