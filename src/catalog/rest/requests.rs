//! The catalog calls floe makes: namespaces, loading and creating tables (with the
//! vended credentials a table comes with), and posting a commit.

use super::*;

/// The header that asks a catalog to vend storage credentials with each table it
/// loads (catalogs that cannot ignore it, and floe uses the configured keys). A
/// `catalog.headers` entry of the same name replaces it; an empty one removes it.
pub(super) const ACCESS_DELEGATION: &str = "x-iceberg-access-delegation";

pub(super) fn ask_for_vended_credentials(headers: &mut reqwest::header::HeaderMap) {
    match headers.get(ACCESS_DELEGATION) {
        None => {
            headers.insert(
                ACCESS_DELEGATION,
                reqwest::header::HeaderValue::from_static("vended-credentials"),
            );
        }
        Some(v) if v.is_empty() => {
            headers.remove(ACCESS_DELEGATION);
        }
        Some(_) => {}
    }
}

impl RestCatalog {
    pub(super) async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let url = format!("{}/namespaces/{}", self.base, encode_namespace(namespace));
        let response = self.send(Method::GET, &url, None::<&()>).await?;
        match response.status() {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(status_error(response, "check namespace").await),
        }
    }
}

impl RestCatalog {
    /// Runs a catalog call, scrubbing every secret from its error (a server may quote
    /// a header or token back in its error body).
    pub(super) async fn redacted<T>(
        &self,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        call.await
            .map_err(|e| Error::new(e.kind(), self.secrets.scrub(e.message().to_string())))
    }

    pub(super) async fn load(&self, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        let response = self
            .send(Method::GET, &self.table_url(ident), None::<&()>)
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let response = expect_ok(response, &format!("load table {ident}")).await?;
        let answer = read_body(response, "load table").await?;
        let result: LoadTableResult = parse_slice(&answer, "load table")?;
        let refs = crate::catalog::refs::refs_of_load_answer(&answer, &result.metadata);
        let table = self.loaded(ident, result);
        Ok(Some(match refs {
            Some(refs) => table.with_refs(Some(refs)),
            None => table,
        }))
    }

    pub(super) async fn create_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        if self.namespace_exists(namespace).await? {
            return Ok(());
        }
        let body = serde_json::json!({ "namespace": namespace.as_ref(), "properties": {} });
        let response = self
            .send(
                Method::POST,
                &format!("{}/namespaces", self.base),
                Some(&body),
            )
            .await?;
        if response.status() == StatusCode::CONFLICT {
            return Ok(());
        }
        match expect_ok(
            response,
            &format!("create namespace {}", namespace.as_ref().join(".")),
        )
        .await
        {
            Ok(_) => Ok(()),
            // A concurrent creator may have won in a way the server reports badly
            // (some servers answer 500 to a duplicate insert): believe what is there.
            Err(e) if self.namespace_exists(namespace).await.unwrap_or(false) => {
                tracing::debug!("namespace created concurrently: {e}");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Creates a table the way the catalog accepts it: on Unity Catalog without
    /// identifier-field ids; and when the catalog refuses properties floe set, naming them
    /// (Unity's "prohibited keys"), once more without those, with a warning.
    pub(super) async fn create_allowed(
        &self,
        ident: &TableIdent,
        mut table: NewTable,
    ) -> Result<LoadedTable> {
        if self.unity && table.schema.identifier_field_ids().next().is_some() {
            table.schema = without_identifier_fields(&table.schema)?;
        }

        match self.create(ident, table.clone()).await {
            Err(e) if e.kind() == ErrorKind::Rejected => {
                let refused = refused_properties(e.message(), &table.properties);
                if refused.is_empty() {
                    return Err(e);
                }
                tracing::warn!(
                    "the catalog refused the table properties {} when creating {ident}; \
                     creating it without them",
                    refused.join(", ")
                );
                table.properties.retain(|k, _| !refused.contains(k));
                self.create(ident, table).await
            }
            other => other,
        }
    }

    pub(super) async fn create(&self, ident: &TableIdent, table: NewTable) -> Result<LoadedTable> {
        let mut properties = table.properties;
        // Catalogs take the format of a new table from this reserved property; v2 is
        // every catalog's default today, so it is sent only for another version. Never
        // dropped on a refusal as other properties are: a catalog that refuses the
        // version refuses the table (the writer checks the version it got, too).
        if table.format_version != iceberg::spec::FormatVersion::V2 {
            properties.insert(
                "format-version".into(),
                (table.format_version as u8).to_string(),
            );
        }
        let request = CreateTableRequest {
            name: ident.name().to_string(),
            location: table.location,
            schema: table.schema,
            partition_spec: table.partition_spec,
            write_order: None,
            stage_create: Some(false),
            properties,
        };
        let url = format!(
            "{}/namespaces/{}/tables",
            self.base,
            encode_namespace(ident.namespace())
        );
        let response = self.send(Method::POST, &url, Some(&request)).await?;
        if response.status() == StatusCode::CONFLICT {
            return self.load(ident).await?.ok_or_else(|| {
                Error::internal(format!("table {ident} exists but cannot be loaded"))
            });
        }
        match expect_ok(response, &format!("create table {ident}")).await {
            Ok(response) => {
                let result: LoadTableResult = parse_json(response, "create table").await?;
                Ok(self.loaded(ident, result))
            }
            // As for namespaces: a concurrent creator may have won.
            Err(e) => match self.load(ident).await {
                Ok(Some(table)) => Ok(table),
                _ => Err(e),
            },
        }
    }

    /// Posts a commit; returns a successful answer, to be read.
    pub(super) async fn post_commit(
        &self,
        ident: &TableIdent,
        request: &CommitTableRequest,
    ) -> Result<CommitAnswer> {
        let what = format!("commit to {ident}");
        let response = self
            .post_changes(&self.table_url(ident), request, &what)
            .await?;
        Ok(CommitAnswer::new(response))
    }

    /// Posts changes to tables; returns a successful answer. Only answers that say the
    /// request was refused are definite failures: a lost connection, 5xx, 408 or a
    /// proxy's surprise may come after the server applied the changes (unknown outcome).
    async fn post_changes<B: serde::Serialize>(
        &self,
        url: &str,
        request: &B,
        what: &str,
    ) -> Result<Response> {
        let response = match self.send(Method::POST, url, Some(request)).await {
            Ok(r) => r,
            // The request may have reached the server before the connection failed.
            Err(e) if e.kind() == ErrorKind::Unavailable => {
                return Err(Error::new(
                    ErrorKind::CommitStateUnknown,
                    e.message().to_string(),
                ));
            }
            Err(e) => return Err(e),
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let error = status_error(response, what).await;
        match definite_refusal(status) {
            true => Err(error),
            false => Err(Error::new(
                ErrorKind::CommitStateUnknown,
                error.message().to_string(),
            )),
        }
    }
}

/// The FileIO properties of a loaded table: the answer's `config`, with the vended
/// credentials whose prefix is the longest one the table's location starts with (the
/// spec lets a catalog scope credentials to parts of the warehouse). floe writes only
/// under the table's location, so one entry serves all its files.
pub(super) fn table_io_props(
    mut config: HashMap<String, String>,
    credentials: Vec<iceberg_catalog_rest::StorageCredential>,
    location: &str,
) -> HashMap<String, String> {
    let offered = credentials.len();
    let best = credentials
        .into_iter()
        .filter(|c| covers(&c.prefix, location))
        .max_by_key(|c| c.prefix.len());
    match best {
        Some(c) => config.extend(c.config),
        None if offered > 0 => tracing::warn!(
            "the catalog vended {offered} storage credentials, none for the table's \
             location {location}; using the configured storage credentials"
        ),
        None => {}
    }
    config
}

/// Whether credentials for `prefix` serve files under `location`: a whole path segment
/// prefix (`s3://b/t` and `s3://b/t/` both cover `s3://b/t`, not `s3://b/tx`), with the
/// s3a/s3n schemes read as s3.
pub(super) fn covers(prefix: &str, location: &str) -> bool {
    if prefix.is_empty() {
        return true;
    }
    let normal = |url: &str| {
        let url = ["s3a://", "s3n://"]
            .iter()
            .find_map(|s| url.strip_prefix(s).map(|rest| format!("s3://{rest}")))
            .unwrap_or_else(|| url.to_string());
        format!("{}/", url.trim_end_matches('/'))
    };
    normal(location).starts_with(&normal(prefix))
}

/// The properties floe asked for that a refusal names (a catalog's list of prohibited
/// keys), longest first so that a key inside another is not taken for it.
pub(super) fn refused_properties(message: &str, asked: &HashMap<String, String>) -> Vec<String> {
    let mut keys: Vec<&String> = asked.keys().collect();
    keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
    let mut rest = message.to_string();
    let mut refused = Vec::new();
    for key in keys {
        if rest.contains(key.as_str()) {
            rest = rest.replace(key.as_str(), "");
            refused.push(key.clone());
        }
    }
    refused.sort();
    refused
}

/// The schema without identifier-field ids (its fields unchanged).
pub(super) fn without_identifier_fields(
    schema: &iceberg::spec::Schema,
) -> Result<iceberg::spec::Schema> {
    iceberg::spec::Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_fields(schema.as_struct().fields().iter().cloned())
        .build()
        .map_err(Error::from)
}

/// The body of `POST /v1/{prefix}/transactions/commit`.
#[derive(serde::Serialize)]
pub(super) struct CommitTransactionRequest {
    #[serde(rename = "table-changes")]
    table_changes: Vec<CommitTableRequest>,
}

impl RestCatalog {
    /// Posts a multi-table commit. The catalog answers without the tables (the spec says
    /// 204; Apache's fixture sends 200 with no body); a refusal refuses every table's
    /// changes.
    pub(super) async fn post_transaction(&self, changes: Vec<TableChanges>) -> Result<()> {
        let names: Vec<String> = changes.iter().map(|c| c.ident.to_string()).collect();
        let what = format!("commit to {} together", names.join(", "));
        let request = CommitTransactionRequest {
            table_changes: changes
                .into_iter()
                .map(|c| commit_request(&c.ident, c.requirements, c.updates))
                .collect(),
        };
        let url = format!("{}/transactions/commit", self.base);
        self.post_changes(&url, &request, &what).await?;
        Ok(())
    }
}

/// Whether `/v1/config`'s endpoints include the multi-table commit. A server that lists
/// none offers the REST spec's default endpoints, which include it.
pub(super) fn offers_commit_transaction(endpoints: Option<&[String]>) -> Result<()> {
    let Some(list) = endpoints else {
        return Ok(());
    };
    let normal = |e: &String| e.split_whitespace().collect::<Vec<_>>().join(" ");
    match list.iter().any(|e| normal(e) == COMMIT_TRANSACTION) {
        true => Ok(()),
        false => Err(Error::config(format!(
            "commit.atomic_tables: the catalog does not offer multi-table commits: \
             {COMMIT_TRANSACTION} is not among the endpoints its /v1/config lists; \
             turn atomic_tables off, or use a catalog that offers it"
        ))),
    }
}

/// Whether an answer says the request was refused (nothing applied).
fn definite_refusal(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        400 | 401 | 403 | 404 | 405 | 406 | 409 | 422 | 429
    )
}

pub(super) fn commit_request(
    ident: &TableIdent,
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
) -> CommitTableRequest {
    CommitTableRequest {
        identifier: Some(ident.clone()),
        requirements,
        updates,
    }
}
