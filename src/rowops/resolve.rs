//! The last operation per key wins: within one call (message order) and across the calls
//! of one commit group (the order their rows reached the committer).
//!
//! A commit writes one row-delta snapshot: its data files and its equality deletes share
//! one sequence number, so the deletes remove older rows with the keys but never the
//! commit's own new rows. What this module must therefore guarantee is that the commit's
//! data holds only rows that survive every later operation in the same commit, and that
//! its deletes name every key any upsert or delete touched.

use std::collections::{HashMap, HashSet};

use arrow_array::{Array, BooleanArray, RecordBatch};
use arrow_row::{Row, Rows};
use arrow_select::filter::filter_record_batch;
use arrow_select::interleave::interleave;

use super::RowOp;
use super::keys::KeyColumns;
use crate::error::{Error, Result};

/// Where a message's key is: a row of the call's data batch (inserts and upserts) or a
/// row of its batch of deleted keys (deletes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAt {
    Data(usize),
    Deleted(usize),
}

/// One call's rows after its operations applied in order.
#[derive(Debug)]
pub struct Resolved {
    /// The rows to write (rows superseded later in the call are gone).
    pub data: RecordBatch,
    /// Every key the call upserted or deleted, once each, in the key schema; `None` when
    /// the call only inserted.
    pub deletes: Option<RecordBatch>,
}

/// How keys are hashed here: foldhash, seeded per process (SipHash, the standard one,
/// took a tenth of a keyed call's shredding).
type KeyHash = foldhash::fast::RandomState;

/// No row: the end of a key's chain of rows in [`resolve_call`].
const NO_ROW: usize = usize::MAX;

/// Applies one call's operations, in message order, to its shredded rows: `data` holds
/// the rows of its inserts and upserts (table schema), `deleted` the keys of its deletes
/// (key schema), `ops` each message's operation and key position (each row of `data`
/// named once).
pub fn resolve_call(
    keys: &KeyColumns,
    data: &RecordBatch,
    deleted: &RecordBatch,
    ops: &[(RowOp, KeyAt)],
) -> Result<Resolved> {
    let converter = keys.converter()?;
    let data_keys = keys.project(data)?;
    let data_rows = keys.rows(&converter, &data_keys)?;
    let deleted_rows = keys.rows(&converter, deleted)?;
    let row = |at: KeyAt| -> Row<'_> {
        match at {
            KeyAt::Data(r) => data_rows.row(r),
            KeyAt::Deleted(r) => deleted_rows.row(r),
        }
    };
    let mut keep = vec![false; data.num_rows()];
    // Per key: its last row written so far (each row links to the key's row before it,
    // in `earlier`), and whether it was upserted or deleted. One lookup per message and
    // no allocation per key: this runs for every keyed row a host hands over.
    let mut keyed: HashMap<Row<'_>, (usize, bool), KeyHash> =
        HashMap::with_capacity_and_hasher(ops.len(), KeyHash::default());
    let mut earlier = vec![NO_ROW; data.num_rows()];
    // The keys upserted or deleted, first seen first.
    let mut picks: Vec<(usize, usize)> = Vec::new();
    for &(op, at) in ops {
        let (last, touched) = keyed.entry(row(at)).or_insert((NO_ROW, false));
        if op != RowOp::Insert {
            let mut r = std::mem::replace(last, NO_ROW);
            while r != NO_ROW {
                keep[r] = false;
                r = earlier[r];
            }
            if !*touched {
                *touched = true;
                picks.push(match at {
                    KeyAt::Data(r) => (0, r),
                    KeyAt::Deleted(r) => (1, r),
                });
            }
        }
        if let KeyAt::Data(r) = at {
            // Each message has its own row: a row named twice would link into its own
            // chain, and the walk above would never end.
            if keep[r] {
                return Err(Error::internal(format!(
                    "row {r} of a call's rows stands for two messages"
                )));
            }
            keep[r] = true;
            earlier[r] = std::mem::replace(last, r);
        }
    }
    let data = filter(data, keep)?;
    let deletes = (!picks.is_empty())
        .then(|| gather(keys, &[&data_keys, deleted], &picks))
        .transpose()?;
    Ok(Resolved { data, deletes })
}

/// Applies a commit group's calls in order: each call's data loses the rows whose key a
/// later call upserted or deleted, and the group's deletes are the union of the calls'
/// (once per key). `parts` holds each call's data (table schema) and deletes (key
/// schema), in the order they reached the committer.
pub fn resolve_group(
    keys: &KeyColumns,
    parts: &[(&RecordBatch, Option<&RecordBatch>)],
) -> Result<(Vec<RecordBatch>, Option<RecordBatch>)> {
    if parts.iter().all(|(_, d)| d.is_none()) {
        return Ok((parts.iter().map(|(b, _)| (*b).clone()).collect(), None));
    }
    let converter = keys.converter()?;
    let deleted: Vec<(usize, Rows)> = parts
        .iter()
        .enumerate()
        .filter_map(|(j, (_, d))| d.map(|d| (j, d)))
        .map(|(j, d)| Ok((j, keys.rows(&converter, d)?)))
        .collect::<Result<_>>()?;
    let batches: Vec<&RecordBatch> = parts.iter().filter_map(|(_, d)| *d).collect();
    // Keys (row-encoded bytes) deleted by a later call. Sized once: a group of 64,000
    // upserts grew it through rehashes to 4.8 MiB, all the group's rows being held
    // meanwhile (the heap's peak for copy-on-write with many calls in flight).
    let most = deleted.iter().map(|(_, rows)| rows.num_rows()).sum();
    let mut later: HashSet<&[u8], KeyHash> =
        HashSet::with_capacity_and_hasher(most, KeyHash::default());
    let mut picks = Vec::new();
    let mut data = vec![None; parts.len()];
    let mut next_deleted = deleted.len();
    for j in (0..parts.len()).rev() {
        let batch = parts[j].0;
        data[j] = Some(if later.is_empty() || batch.num_rows() == 0 {
            batch.clone()
        } else {
            let rows = keys.rows(&converter, &keys.project(batch)?)?;
            let keep = (0..rows.num_rows())
                .map(|r| !later.contains(rows.row(r).data()))
                .collect();
            filter(batch, keep)?
        });
        if next_deleted > 0 && deleted[next_deleted - 1].0 == j {
            next_deleted -= 1;
            let rows = &deleted[next_deleted].1;
            for r in 0..rows.num_rows() {
                if later.insert(rows.row(r).data()) {
                    picks.push((next_deleted, r));
                }
            }
        }
    }
    let deletes = gather(keys, &batches, &picks)?;
    Ok((
        data.into_iter().map(Option::unwrap).collect(),
        Some(deletes),
    ))
}

fn filter(batch: &RecordBatch, keep: Vec<bool>) -> Result<RecordBatch> {
    if keep.iter().all(|&k| k) {
        return Ok(batch.clone());
    }
    filter_record_batch(batch, &BooleanArray::from(keep))
        .map_err(|e| Error::internal(format!("dropping superseded rows: {e}")))
}

/// The key rows `picks` (batch, row) of `sources` (key schema), as one batch.
fn gather(
    keys: &KeyColumns,
    sources: &[&RecordBatch],
    picks: &[(usize, usize)],
) -> Result<RecordBatch> {
    let columns = (0..keys.arrow.fields().len())
        .map(|c| {
            let arrays: Vec<&dyn Array> = sources.iter().map(|b| b.column(c).as_ref()).collect();
            interleave(&arrays, picks)
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::internal(format!("collecting deleted keys: {e}")))?;
    RecordBatch::try_new(keys.arrow.clone(), columns)
        .map_err(|e| Error::internal(format!("collecting deleted keys: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int64Array, StringArray};
    use iceberg::spec::Schema;
    use std::sync::Arc;

    fn keys() -> KeyColumns {
        let schema: Schema = serde_json::from_str(
            r#"{"type":"struct","schema-id":0,"identifier-field-ids":[1],"fields":[
            {"id":1,"name":"id","required":true,"type":"long"},
            {"id":2,"name":"v","required":false,"type":"string"}]}"#,
        )
        .unwrap();
        KeyColumns::for_table(&schema, &[], true).unwrap().unwrap()
    }

    fn data(k: &KeyColumns, rows: &[(i64, &str)]) -> RecordBatch {
        let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&k_table(k)).unwrap());
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap()
    }

    fn k_table(_: &KeyColumns) -> Schema {
        serde_json::from_str(
            r#"{"type":"struct","schema-id":0,"identifier-field-ids":[1],"fields":[
            {"id":1,"name":"id","required":true,"type":"long"},
            {"id":2,"name":"v","required":false,"type":"string"}]}"#,
        )
        .unwrap()
    }

    fn deleted(k: &KeyColumns, ids: &[i64]) -> RecordBatch {
        RecordBatch::try_new(
            k.arrow.clone(),
            vec![Arc::new(Int64Array::from_iter_values(ids.iter().copied()))],
        )
        .unwrap()
    }

    fn ids(batch: &RecordBatch) -> Vec<i64> {
        batch
            .column(0)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec()
    }

    fn values(batch: &RecordBatch) -> Vec<String> {
        batch
            .column(1)
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap().to_string())
            .collect()
    }

    #[test]
    fn within_a_call_the_last_operation_per_key_wins() {
        let k = keys();
        // insert 1a, upsert 1b, upsert 2a, delete 2, insert 3a, upsert 1c, insert 2b
        let d = data(
            &k,
            &[(1, "a"), (1, "b"), (2, "a"), (3, "a"), (1, "c"), (2, "b")],
        );
        let del = deleted(&k, &[2]);
        use KeyAt::*;
        use RowOp::*;
        let ops = [
            (Insert, Data(0)),
            (Upsert, Data(1)),
            (Upsert, Data(2)),
            (Delete, Deleted(0)),
            (Insert, Data(3)),
            (Upsert, Data(4)),
            (Insert, Data(5)),
        ];
        let r = resolve_call(&k, &d, &del, &ops).unwrap();
        assert_eq!(ids(&r.data), vec![3, 1, 2]);
        assert_eq!(values(&r.data), vec!["a", "c", "b"]);
        assert_eq!(ids(&r.deletes.unwrap()), vec![1, 2]);
    }

    #[test]
    fn inserts_alone_delete_nothing() {
        let k = keys();
        let d = data(&k, &[(1, "a"), (1, "b")]);
        let ops = [
            (RowOp::Insert, KeyAt::Data(0)),
            (RowOp::Insert, KeyAt::Data(1)),
        ];
        let r = resolve_call(&k, &d, &deleted(&k, &[]), &ops).unwrap();
        assert_eq!(ids(&r.data), vec![1, 1]);
        assert!(r.deletes.is_none());
    }

    #[test]
    fn across_a_group_later_calls_win() {
        let k = keys();
        let first = data(&k, &[(1, "a"), (2, "a"), (3, "a")]);
        let first_del = deleted(&k, &[1, 2, 3]);
        let second = data(&k, &[(2, "b")]);
        let second_del = deleted(&k, &[2, 3]);
        let inserts_only = data(&k, &[(4, "a")]);
        let (data, deletes) = resolve_group(
            &k,
            &[
                (&first, Some(&first_del)),
                (&second, Some(&second_del)),
                (&inserts_only, None),
            ],
        )
        .unwrap();
        assert_eq!(ids(&data[0]), vec![1]);
        assert_eq!(ids(&data[1]), vec![2]);
        assert_eq!(ids(&data[2]), vec![4]);
        let mut deleted = ids(&deletes.unwrap());
        deleted.sort();
        assert_eq!(deleted, vec![1, 2, 3]);
    }

    /// Random calls over a few keys (inserts, upserts, deletes, repeats) against a model
    /// of what the call leaves: each key's rows in message order, cleared by an upsert
    /// or a delete; the deletes, every upserted or deleted key once, first seen first.
    #[test]
    fn random_calls_leave_what_a_model_of_them_leaves() {
        let k = keys();
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for _ in 0..500 {
            let (mut rows, mut dels, mut ops) = (Vec::new(), Vec::new(), Vec::new());
            let mut model: Vec<(i64, String)> = Vec::new();
            let mut touched: Vec<i64> = Vec::new();
            for m in 0..next(40) {
                let id = next(6) as i64;
                let v = format!("m{m}");
                let op = [RowOp::Insert, RowOp::Upsert, RowOp::Delete][next(3) as usize];
                if op != RowOp::Insert {
                    model.retain(|(i, _)| *i != id);
                    if !touched.contains(&id) {
                        touched.push(id);
                    }
                }
                let at = match op {
                    RowOp::Delete => {
                        dels.push(id);
                        KeyAt::Deleted(dels.len() - 1)
                    }
                    _ => {
                        model.push((id, v.clone()));
                        rows.push((id, v));
                        KeyAt::Data(rows.len() - 1)
                    }
                };
                ops.push((op, at));
            }
            let rows_ref: Vec<(i64, &str)> = rows.iter().map(|(i, v)| (*i, v.as_str())).collect();
            let r = resolve_call(&k, &data(&k, &rows_ref), &deleted(&k, &dels), &ops).unwrap();
            let got: Vec<(i64, String)> = ids(&r.data).into_iter().zip(values(&r.data)).collect();
            assert_eq!(got, model, "ops {ops:?} rows {rows:?} deletes {dels:?}");
            let deletes = r.deletes.map(|d| ids(&d)).unwrap_or_default();
            assert_eq!(deletes, touched, "ops {ops:?}");
        }
    }

    #[test]
    fn a_row_named_twice_is_refused_not_looped_on() {
        let k = keys();
        let d = data(&k, &[(1, "a"), (1, "b")]);
        use KeyAt::*;
        use RowOp::*;
        let ops = [(Insert, Data(0)), (Insert, Data(0)), (Upsert, Data(1))];
        let e = resolve_call(&k, &d, &deleted(&k, &[]), &ops).unwrap_err();
        assert!(e.to_string().contains("two messages"), "{e}");
    }
}
