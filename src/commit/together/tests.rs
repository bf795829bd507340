//! The rendezvous against the embedded catalog (a real SQLite database and metadata files
//! in a temporary folder).

use super::*;
use crate::catalog::sql::catalog_with_tables;
use std::collections::HashMap;

struct Tables {
    catalog: Arc<dyn Catalog>,
    _dir: tempfile::TempDir,
}

async fn tables(names: &[&str]) -> (Tables, Vec<TableIdent>) {
    let dir = tempfile::tempdir().unwrap();
    let (catalog, idents) = catalog_with_tables(dir.path(), names).await;
    let t = Tables {
        catalog: Arc::new(catalog),
        _dir: dir,
    };
    (t, idents)
}

/// The parties, one per table, by name.
fn each<const N: usize>(parties: Vec<Party>) -> [Party; N] {
    parties.try_into().ok().expect("one party per table")
}

impl Tables {
    async fn load(&self, ident: &TableIdent) -> LoadedTable {
        self.catalog.load_table(ident).await.unwrap().unwrap()
    }

    async fn mark(&self, ident: &TableIdent) -> Option<String> {
        self.load(ident)
            .await
            .metadata
            .properties()
            .get("mark")
            .cloned()
    }

    /// `party`'s part: sets property `mark` to `value` on the table as loaded now.
    async fn part(&self, party: &Party, value: &str) -> Result<LoadedTable> {
        let base = self.load(party.ident()).await;
        let requirements = vec![TableRequirement::UuidMatch {
            uuid: base.metadata.uuid(),
        }];
        self.part_on(party, base, requirements, value).await
    }

    async fn part_on(
        &self,
        party: &Party,
        base: LoadedTable,
        requirements: Vec<TableRequirement>,
        value: &str,
    ) -> Result<LoadedTable> {
        let updates = vec![TableUpdate::SetProperties {
            updates: HashMap::from([("mark".to_string(), value.to_string())]),
        }];
        party.commit(base, requirements, updates).await.result
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parts_land_together_once_every_table_is_in() {
    let (t, idents) = tables(&["a", "b", "c"]).await;
    let [mut a, b, c] = each(parties(t.catalog.clone(), &idents));
    let (a_done, b_done) = tokio::join!(t.part(&a, "1"), async {
        // Until c withdraws, the two parts wait: nothing is committed.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(t.mark(&idents[0]).await, None, "a landed without b");
        let answer = t.part(&b, "1");
        tokio::pin!(answer);
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), &mut answer).await;
        assert!(early.is_err(), "a round ran without c");
        c.withdraw();
        answer.await
    });
    let (a_table, b_table) = (a_done.unwrap(), b_done.unwrap());
    assert_eq!(a_table.metadata.properties()["mark"], "1");
    assert_eq!(b_table.metadata.properties()["mark"], "1");
    assert_eq!(t.mark(&idents[1]).await.as_deref(), Some("1"));
    assert_eq!(t.mark(&idents[2]).await, None);
    a.landed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_on_one_table_refuses_every_part_and_the_next_round_lands() {
    let (t, idents) = tables(&["a", "b"]).await;
    let [mut a, mut b] = each(parties(t.catalog.clone(), &idents));
    // b's part is built on a table another writer changed since: its requirement fails.
    let stale = t.load(&idents[1]).await;
    let stale_requirement = vec![TableRequirement::UuidMatch {
        uuid: uuid::Uuid::new_v4(),
    }];
    let (ra, rb) = tokio::join!(
        t.part(&a, "1"),
        t.part_on(&b, stale.clone(), stale_requirement, "1")
    );
    assert_eq!(ra.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(rb.unwrap_err().kind(), ErrorKind::Conflict);
    assert_eq!(
        t.mark(&idents[0]).await,
        None,
        "a landed though b conflicted"
    );
    // Rebuilt on the new heads, the next round lands.
    let (ra, rb) = tokio::join!(t.part(&a, "2"), t.part(&b, "2"));
    ra.unwrap();
    rb.unwrap();
    assert_eq!(t.mark(&idents[0]).await.as_deref(), Some("2"));
    assert_eq!(t.mark(&idents[1]).await.as_deref(), Some("2"));
    a.landed();
    b.landed();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_dropped_calls_the_transaction_off_for_the_parts_waiting_and_to_come() {
    let (t, idents) = tables(&["a", "b", "c"]).await;
    let [a, b, c] = each(parties(t.catalog.clone(), &idents));
    let (ra, ()) = tokio::join!(t.part(&a, "1"), async {
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        drop(b); // b's rows could not be written
    });
    let e = ra.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled);
    assert!(e.to_string().contains("ns.b"), "{e}");
    let later = t.part(&c, "1").await.unwrap_err();
    assert_eq!(later.kind(), ErrorKind::Cancelled);
    for ident in &idents {
        assert_eq!(t.mark(ident).await, None, "{ident} changed");
    }
}

/// After an unknown outcome, one table's look may find the transaction landed while
/// another's, earlier, found it absent and handed in a part for the next round: that part
/// must not wait for ever for a table that is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_handed_in_after_another_table_found_the_transaction_landed_looks_again() {
    let (t, idents) = tables(&["a", "b"]).await;
    let [a, mut b] = each(parties(t.catalog.clone(), &idents));
    let waiting = tokio::spawn(async move {
        let answer = t.part(&a, "2").await;
        (answer, a, t)
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    b.landed(); // b's look found the transaction
    let (answer, a, t) = tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
        .await
        .expect("a's part waits for a table that is done")
        .unwrap();
    assert_eq!(answer.unwrap_err().kind(), ErrorKind::CommitStateUnknown);
    let again = tokio::time::timeout(std::time::Duration::from_secs(5), t.part(&a, "3"))
        .await
        .expect("a later part waits for a table that is done")
        .unwrap_err();
    assert_eq!(again.kind(), ErrorKind::CommitStateUnknown);
    assert_eq!(t.mark(&idents[0]).await, None);
}
