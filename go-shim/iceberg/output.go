// Package iceberg registers floe's `iceberg` batch output with a Benthos v4 host.
//
// Field names follow the Redpanda Connect iceberg output so existing YAML runs
// unchanged; fields floe does not support yet fail lint with a clear message. The
// parsed config is handed to libfloe as JSON; each WriteBatch is one cgo call.
package iceberg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floe-dev/floe/go-shim/floe"
	"github.com/redpanda-data/benthos/v4/public/bloblang"
	"github.com/redpanda-data/benthos/v4/public/service"
)

const (
	fCatalog       = "catalog"
	fNamespace     = "namespace"
	fTable         = "table"
	fCaseSensitive = "case_sensitive_columns"
	fRowOperation  = "row_operation"
	fIdentifiers   = "identifier_fields"
	fMergeStrategy = "merge_strategy"
	fStorage       = "storage"
	fEvolution     = "schema_evolution"
	fCommit        = "commit"
	fParquet       = "parquet"
	fJSON          = "json"
	fBatching      = "batching"
	fRuntime       = "runtime_threads"
)

// ConfigSpec is the `iceberg` output's spec.
func ConfigSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Services").
		Summary("Writes message batches to Apache Iceberg tables through floe's Rust data plane.").
		Description("Each batch is shredded from JSON to Arrow, written as Parquet and committed per table; concurrent batches share snapshots (group commit). Without `catalog.url`, an embedded SQLite catalog in `./warehouse` is used.").
		Fields(
			service.NewObjectField(fCatalog,
				service.NewStringField("url").Optional().Description("REST catalog URL (http/https), or `sqlite:<path>` for the embedded catalog (or SQLAlchemy's form: `sqlite:////abs/path`, `sqlite:///rel/path`). Unset or empty: embedded catalog in the warehouse folder."),
				service.NewStringField("warehouse").Optional().Description("REST: warehouse name. Embedded: folder or s3:// URL holding the tables (default `./warehouse`; an s3:// URL needs `url: sqlite:<path>` for the catalog's database)."),
				service.NewStringField("name").Optional().Description("Embedded catalog only: the catalog name its SQLite tables record (default `floe`), as a JDBC catalog's name; readers opening the database use it."),
				service.NewObjectField("auth",
					service.NewObjectField("oauth2",
						service.NewStringField("server_uri").Optional().Description(defaultNote("Token endpoint; a relative path is resolved against `catalog.url`.", "catalog.auth.oauth2.server_uri")),
						service.NewStringField("client_id").Optional().Description("The OAuth2 client id."),
						service.NewStringField("client_secret").Secret().Optional().Description("The OAuth2 client secret."),
						service.NewStringField("scope").Optional().Description("The OAuth2 scope, sent when set (e.g. `PRINCIPAL_ROLE:ALL` for Polaris, `all-apis` for Databricks)."),
					).Optional().Description("OAuth2 client credentials: the token is fetched from `server_uri`, and fetched again before it expires and when the catalog answers 401."),
					service.NewStringField("bearer").Secret().Optional().Description("A static token sent as `Authorization: Bearer …` (e.g. a Databricks personal access token)."),
					sigv4Spec(),
				).Optional().Description("How floe authenticates to a REST catalog: `oauth2`, `bearer` or `aws_sigv4`. Refused with the embedded catalog."),
				service.NewStringMapField("headers").Default(def("catalog.headers")).Description("HTTP headers sent with every catalog request (their values never appear in logs or errors). An `X-Iceberg-Access-Delegation` entry replaces floe's `vended-credentials`; an empty one stops sending it, for catalogs that refuse the header."),
				service.NewBoolField("tls_skip_verify").Default(def("catalog.tls_skip_verify")).Description("Accept any certificate from an `https://` catalog. For tests only: a private CA belongs in `tls_root_cas_file`."),
				service.NewStringField("tls_root_cas_file").Optional().Description("A PEM file of CA certificates the catalog's certificate may chain to (a private CA), trusted beside the system's roots (`SSL_CERT_FILE` too) and the bundled Mozilla roots."),
			).Description("The Iceberg catalog: a REST catalog at `url`, or the embedded SQLite catalog when `url` is unset."),
			service.NewInterpolatedStringField(fNamespace).Description("Namespace; dots separate levels."),
			service.NewInterpolatedStringField(fTable).Description("Table name."),
			service.NewBoolField(fCaseSensitive).Default(def(fCaseSensitive)).Description("Whether JSON field names (and `identifier_fields`, and the paths of explicit types) must match column names in case. `false`: a field matches a column whatever its case."),
			service.NewInterpolatedStringField(fRowOperation).Default("insert").Description("Per message: `insert` appends the row; `upsert` replaces every row with the message's key; `delete` removes them (the message needs only the key fields). Within a commit the last operation per key wins."),
			service.NewStringListField(fIdentifiers).Default(def(fIdentifiers)).Description("The key upserts and deletes match by: top-level, non-floating-point columns. Empty: the table's own identifier fields. Tables floe creates register them (as required columns), except on Unity Catalog, which refuses them: there the key lives only in this setting."),
			service.NewStringEnumField(fMergeStrategy, "merge-on-read", "copy-on-write", "merge-on-read-positional").Optional().Description("How upserts and deletes are written. Unset: as the table's `write.update.mode` / `write.delete.mode` say, else `merge-on-read` (`copy-on-write` on Unity Catalog, whose readers apply no delete files; merge-on-read is refused there); set and contradicted by them: a config error. `merge-on-read`: the new rows plus equality-delete files on the key, in one snapshot (Iceberg v2; readers that apply equality deletes: Spark, Trino, Flink, DuckDB, iceberg-rust, iceberg-go). `copy-on-write`: the data files holding the keys are rewritten without their rows, in one overwrite snapshot with no delete files (readable by every engine, incl. pyiceberg, Snowflake and Unity Catalog; costs a rewrite of each touched file). `merge-on-read-positional`: copy-on-write's key lookup, but the touched rows' positions are written as position-delete files instead of rewriting (Iceberg v2; cheaper than a rewrite, and readable by engines that apply position deletes but not equality deletes, e.g. pyiceberg; a table's `merge-on-read` write modes allow it)."),
			service.NewObjectField(fStorage,
				service.NewObjectField("aws_s3",
					service.NewStringField("bucket").Optional().Description("Tables must be in this bucket: a table (or the embedded catalog's warehouse) whose location is elsewhere is refused, both named."),
					service.NewStringField("region").Optional().Description("The region S3 requests are signed for (a catalog may vend one as `client.region`)."),
					service.NewStringField("endpoint").Optional().Description("The S3 API's address for S3-compatible stores, e.g. `http://127.0.0.1:8333`; AWS's by default. No user or password in it."),
					service.NewBoolField("force_path_style_urls").Optional().Description(defaultNote("Path-style requests (`endpoint/bucket/key`), as MinIO and SeaweedFS need.", "storage.aws_s3.force_path_style_urls")),
					service.NewObjectField("credentials",
						service.NewStringField("id").Optional().Description("The access key id."),
						service.NewStringField("secret").Secret().Optional().Description("The secret access key."),
						service.NewStringField("token").Secret().Optional().Description("The session token of temporary credentials."),
					).Optional().Description("Static S3 keys, used when the catalog vends none. Absent: AWS's default chain (environment, shared profile, web identity, container endpoint, instance role), fetched again before temporary credentials expire."),
				).Optional().Description("S3 and S3-compatible storage (MinIO, SeaweedFS, …) for `s3://` tables."),
				service.NewObjectField("gcp_cloud_storage",
					service.NewStringField("bucket").Optional().Description("Tables must be in this bucket (`gs://bucket/…`)."),
					service.NewStringField("endpoint").Optional().Description("The JSON API's address, e.g. an emulator's; Google's by default."),
					service.NewStringEnumField("credentials_type", "application_default", "service_account", "none").Optional().Description("`application_default`: `GOOGLE_APPLICATION_CREDENTIALS`, gcloud's configuration, then the VM's metadata server; `service_account`: the key in `credentials_file` or `credentials_json`; `none`: no credentials (emulators, public buckets). Unset: `service_account` when a key is given, else `application_default`."),
					service.NewStringField("credentials_file").Optional().Description("A service account key file (JSON)."),
					service.NewStringField("credentials_json").Secret().Optional().Description("A service account key (JSON, or base64 of it)."),
				).Optional().Description("Google Cloud Storage."),
				service.NewObjectField("azure_blob_storage",
					service.NewStringField("storage_account").Optional().Description("The storage account: tables must be in it."),
					service.NewStringField("container").Optional().Description("Tables must be in this container (`abfss://container@account.dfs.core.windows.net/…`)."),
					service.NewStringField("endpoint").Optional().Description("Only the account's DFS endpoint (`https://<account>.dfs.<suffix>`): the endpoint comes from each `abfss://` location."),
					service.NewStringField("storage_sas_token").Secret().Optional().Description("A shared access signature for the container (one of a SAS token and an access key)."),
					service.NewStringField("storage_connection_string").Secret().Optional().Description("`AccountName`, `AccountKey` and `SharedAccessSignature` are taken from it; endpoint parts are refused."),
					service.NewStringField("storage_access_key").Secret().Optional().Description("The storage account's access key (one of an access key and a SAS token)."),
				).Optional().Description("Azure Data Lake Storage Gen2 (ADLS, the DFS API; not tested against Azure: see docs/catalogs-and-storage.md)."),
			).Description("Object storage for table files, by the scheme of each table's location (`s3://`, `gs://`, `abfss://`). Tables in a local folder need none."),
			service.NewObjectField(fEvolution,
				service.NewBoolField("enabled").Default(def("schema_evolution.enabled")).Description("Create the namespace and table when missing, and evolve the schema on write: new fields become optional columns at any depth (struct fields, list elements, map values), a null in a required column makes it optional (never an identifier field), and int → long, float → double and decimal precision widen when a value needs it. One schema update per change, before the data that needs it; concurrent writers converge."),
				service.NewStringEnumField("unknown_fields", "error", "ignore").Default(def("schema_evolution.unknown_fields")).Description("Without evolution: what a JSON field that is not a column does. `error` (the default) fails the message with an error naming the field, so a new field is noticed rather than dropped without a trace; `ignore` writes the rest of the message. Fields holding no data (`null`, `[]`, `{}`) are skipped either way."),
				service.NewStringField("partition_spec").Optional().Description("Partition spec of tables floe creates, e.g. `(day(ts), bucket(16, user_id))`; transforms identity, year, month, day, hour, bucket[N], truncate[W], void. An existing table's own spec must match."),
				service.NewAnyField("schema").Optional().Description("The schema of tables floe creates, as Iceberg schema JSON (an object with `type: struct` and `fields`); inferred from the first batch when absent."),
				service.NewIntField("format_version").Default(def("schema_evolution.format_version")).Description("The Iceberg format version of tables floe creates: `2`, which every reader reads, or `3` (row lineage, nanosecond timestamps; positional upserts write deletion vectors), which fewer readers read yet (see docs/upserts.md). Existing tables keep their own."),
				service.NewStringField("table_location").Optional().Description("Location prefix of tables floe creates: a table goes in `<table_location>/<namespace levels>/<table>` (a plain path is a local folder). Unset: the catalog chooses."),
				service.NewStringField("schema_metadata").Optional().Description("A metadata key whose value, per message, is a JSON object of field path (`a.b`; a list's element `a.element`) → Iceberg primitive type (`long`, `timestamptz`, `decimal(12, 2)`, …). When a column is added (or the table created) these types win over inference, and a field that is only null so far can be typed. A value that is not such an object fails its message."),
				service.NewBoolField("require_schema_metadata").Default(def("schema_evolution.require_schema_metadata")).Description("A message without the `schema_metadata` key fails (as its own fault)."),
				service.NewBloblangField("new_column_type_mapping").Optional().Description("A Bloblang mapping run on each message; its result, an object of field path → Iceberg primitive type, is merged over the `schema_metadata` types and wins over inference when a column is added. E.g. `root = this.keys().filter(k -> k.has_suffix(\"_at\")).map_each(k -> {(k): \"timestamptz\"}).squash()`."),
			).Description("Creating tables and evolving their schema from the data."),
			service.NewObjectField(fCommit,
				service.NewDurationField("max_snapshot_age").Default(def("commit.max_snapshot_age")).Description("Snapshots older than this are expired, unless the table's `history.expire.max-snapshot-age-ms` or its branch's retention says otherwise (the table's settings win). `0s` turns expiry off."),
				service.NewIntField("max_snapshots").Default(def("commit.max_snapshots")).Description("Most snapshots a branch keeps under floe's defaults, whatever their age (each commit makes the catalog rewrite the whole table metadata). Ignored for a table or branch with its own max snapshot age."),
				service.NewBoolField("manifest_merge_enabled").Default(def("commit.manifest_merge_enabled")).Description("Merge small manifests once the table holds `commit.manifest.min-count-to-merge` of them (table properties; default 100), so the manifests a reader opens stay bounded."),
				service.NewIntField("max_retries").Default(def("commit.max_retries")).Description("Retries of throttling answers (429/503) and of commits of unknown outcome; conflicts with other writers are retried until `retry_timeout`."),
				service.NewDurationField("retry_timeout").Default(def("commit.retry_timeout")).Description("How long a commit keeps rebasing onto other writers' commits after conflicts before it fails; also how long floe keeps asking an unreachable catalog whether a commit of unknown outcome landed, before it reports the outcome unknown."),
				service.NewBoolField("cleanup_on_failure").Default(def("commit.cleanup_on_failure")).Description("Delete the files of a commit the catalog definitively refused. Files of a commit whose outcome is unknown are always kept: it may still land."),
				service.NewDurationField("linger").Default(def("commit.linger")).Advanced().Description("How long the committer waits for more batches before writing a commit group. 0: batches that arrive while a commit is in flight share the next snapshot."),
				service.NewIntField("max_group_rows").Default(def("commit.max_group_rows")).Advanced().Description("Most rows in one commit group."),
				service.NewIntField("max_group_bytes").Default(def("commit.max_group_bytes")).Advanced().Description("Most JSON bytes in one commit group. Also bounds the rows that wait shredded for a table's encoder: beyond 8 calls, a call shreds only while their JSON and its own fit under this or 8 MiB, whichever is smaller (the others wait as JSON)."),
				service.NewDurationField("table_idle_timeout").Default(def("commit.table_idle_timeout")).Advanced().Description("A table no batch has written for this long is closed: its committer stops and its caches are freed; the next message for it opens it again (one catalog load). Bounds what a pipeline routing to many tables holds for those it no longer writes. `0s`: tables stay open."),
				service.NewBoolField("atomic_tables").Default(def("commit.atomic_tables")).Description("Commit the tables one batch writes in one catalog transaction (REST `POST /v1/{prefix}/transactions/commit`; one SQLite transaction for the embedded catalog): readers see every table of the batch change or none, e.g. a CDC batch routed to several tables by `table: ${! meta(\"table\") }`. A message failing through its own fault fails alone and the rest commit; any other failure on one table fails the batch on all of them, to be retried whole. Such batches keep arrival order, and group commit never puts two of them in one snapshot of a table. Only as atomic as the catalog: Apache's REST fixture checks every table's requirements, then commits the tables one by one. A catalog whose `/v1/config` lists endpoints without this one is a config error at start-up."),
				service.NewObjectField("exactly_once",
					service.NewStringField("writer_id").Optional().Description("Names this pipeline in snapshot summaries; processes sharing sources should share it."),
					service.NewInterpolatedStringField("source").Description("Where a message came from, e.g. `${! meta(\"kafka_topic\") }/${! meta(\"kafka_partition\") }`."),
					service.NewInterpolatedStringField("offset").Description("The message's integer offset within its source, e.g. `${! meta(\"kafka_offset\") }`."),
				).Optional().Description("Exactly-once across restarts: the committed offsets per source are kept in the table (property `floe.offsets.<writer_id>`, set in the same commit as the rows), and messages already committed are acknowledged without being written again."),
			).Description("Concurrent batches (`max_in_flight`) share snapshots (group commit). Conflicts with other writers are rebased and retried for up to `retry_timeout`, throttling up to `max_retries` times (exponential backoff with jitter); commits of unknown outcome are looked up by commit id before any retry. Small manifests are merged (the table's `commit.manifest.*` properties apply), snapshots older than `max_snapshot_age` are expired and unreachable files deleted, files of refused commits deleted when `cleanup_on_failure`."),
			service.NewObjectField(fParquet,
				service.NewStringEnumField("string_encoding", "", "delta_length_byte_array", "plain").Optional().Description("Encoding of string columns outside lists and maps where no dictionary is used. Unset or empty: the Parquet writer's choice (delta_byte_array, after a dictionary where one is used); no table property sets it."),
				service.NewStringEnumField("compression", "", "zstd", "snappy", "lz4", "gzip", "uncompressed").Optional().Description("Unset or empty: the table's `write.parquet.compression-codec`, else zstd."),
				service.NewIntField("compression_level").Optional().Description("zstd 1–22, gzip 1–9; unset or 0: the codec's default (zstd: 1)."),
				service.NewIntField("row_group_size").Optional().Description("Most rows in one row group. Unset or 0: the Parquet writer's default (the table's `write.parquet.row-group-size-bytes` caps a row group's bytes either way)."),
				service.NewIntField("page_size").Optional().Description("Most bytes in one data page. Unset or 0: the table's `write.parquet.page-size-bytes`, else the Parquet writer's default."),
				service.NewIntField("page_row_limit").Optional().Description("Most rows in one data page. Unset or 0: the table's `write.parquet.page-row-limit`, else 1,024. Copy-on-write upserts copy the pages that hold no replaced row as they are and re-encode only the others: smaller pages make each rewrite cheaper, larger ones compress slightly better."),
				service.NewBoolField("dictionary").Optional().Description("Dictionary encoding of columns. Unset: each commit group's data files use a dictionary on the columns whose values it shrinks (up to 16,384 of the group's values sampled; a copy-on-write rewrite samples its first rows), judged as Parquet's Java writer judges at its first page (a column of distinct values, such as ids or payloads, is written without one); true: on for every column; false: off."),
				service.NewIntField("target_file_size_bytes").Optional().Description("Size at which a data file is closed and the next begun. Unset or 0: the table's `write.target-file-size-bytes`, else 512 MiB."),
			).Description("Parquet writer settings. Each unset field takes the table's `write.parquet.*` property where one exists, else floe's default."),
			service.NewObjectField(fJSON,
				service.NewStringEnumField("epoch_unit", "s", "ms", "us", "ns").Default(def("json.epoch_unit")).Description("Unit of epoch numbers given for timestamp columns."),
			).Description("How JSON values are read into columns."),
			service.NewStringEnumField(fPermanent, permanentRetry, permanentFail, permanentStop).Default(permanentRetry).Description("What a permanent error does: one that retrying the batch unchanged cannot cure (the catalog refuses the credentials (401/403) or the request, a table is missing and `schema_evolution` is off, the warehouse folder cannot be made, the bucket does not exist, a table does not suit this config). `retry` (the default): the batch is retried until it commits, as through an outage (the error logged once per cause and again every 30 s), so nothing is lost or reordered and a fix (a grant, the table) is taken up without a restart. `fail`: the batch fails with the error, as with any Benthos output: a fallback output receives it; without one the input's nack handling applies (most inputs deliver it again, after newer batches: with upserts or deletes an older operation on a key may then win), and each failure is logged. `stop`: the host stops with exit code 1, acknowledging nothing it did not write. Outages, conflicts, commits of unknown outcome and storage refusals (which fresh credentials may cure) are always retried; messages that fail through their own fault always fail alone."),
			service.NewDurationField(fProgress).Default("1m").Advanced().Description("How often a progress line is logged at info level: rows committed and their rate, snapshots, failed messages and messages waiting to be retried (nothing while idle). `0s`: never."),
			service.NewIntField(fRuntime).Optional().Advanced().Description("Worker threads of floe's runtime, one per process: the first writer opened sets it (unset or 0: one per core)."),
			service.NewOutputMaxInFlightField(),
			service.NewIntField(fMaxProcessInFlightBytes).Default(0).Advanced().Description("Most message bytes of the write calls in flight together across every `iceberg` output of the process (a `switch` or `broker` with several): a call waits, in arrival order, after its own output's `max_in_flight_bytes`, until its bytes fit under this too. Outputs that set it differently share the smallest. `0` (the default): each output is bounded by its own limit only."),
			service.NewIntField(fMaxInFlightBytes).Default(defaultMaxInFlightBytes).Advanced().Description("Most message bytes (the JSON handed to the output) of the write calls in flight together. A call waits until its bytes fit, in arrival order, so once `max_in_flight` calls wait the input stops reading: memory stays bounded when batches are large or `max_in_flight` is high (e.g. routing to many tables), rather than growing until the process is killed. A call larger than the limit is written alone. Encoding takes about as much again per call. `0`: no limit beyond `max_in_flight`."),
			service.NewBatchPolicyField(fBatching),
		).
		LintRule(`root = this.floe_iceberg_config_problems()`)
}

func init() {
	registerConfigLint()
	err := service.RegisterBatchOutput("iceberg", ConfigSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchOutput, service.BatchPolicy, int, error) {
			maxInFlight, err := conf.FieldMaxInFlight()
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			policy, err := conf.FieldBatchPolicy(fBatching)
			if err != nil {
				return nil, service.BatchPolicy{}, 0, err
			}
			out, err := newOutput(conf, mgr)
			if err == nil {
				policy = guardBatchPolicy(policy, mgr.Logger())
			}
			return out, policy, maxInFlight, err
		})
	if err != nil {
		panic(err)
	}
}

type output struct {
	configJSON []byte
	namespace  *service.InterpolatedString
	table      *service.InterpolatedString
	// Per-message row operation; nil when every message is an insert.
	rowOp *rowOperation
	// Whether calls keep their place in arrival order (keyed writes, atomic_tables).
	ordered bool
	// Exactly-once positions; nil when off.
	source *service.InterpolatedString
	offset *service.InterpolatedString
	// Explicit column types per message; empty / nil when not configured.
	typesMeta   string
	requireMeta bool
	// case_sensitive_columns: type paths match in any case when false.
	caseSensitive bool
	typeMapping   *bloblang.Executor
	log           *service.Logger

	metrics *metrics
	// The config's table as `namespace.table` when neither is interpolated, else "".
	fixedTable string

	mu     sync.RWMutex
	writer *floe.Writer

	// Failures of whole calls (outages), for backoff and one log line per cause.
	outage outage
	// permanent_errors: retry, fail or stop.
	permanent string
	// schema_evolution.enabled: a missing table is then created, not a permanent error.
	evolves bool
	// The error of the last libfloe open, kept under permanent_errors fail or stop so
	// that write calls fail with it.
	openErr error
	// max_in_flight_bytes: calls wait here until their bytes fit.
	gate *byteGate
	// Calls handed over and not yet answered; failed messages' log lines.
	pending  pending
	messages messageLog

	// Closed at Close: stops the progress line.
	done      chan struct{}
	closeOnce sync.Once

	// Mean JSON bytes per message of the last batch: sizes the next batch's buffer.
	payloadSize atomic.Int64
}

// rememberPayloadSize keeps the mean size of a batch's messages for the next buffer.
func (o *output) rememberPayloadSize(payloads [][]byte) {
	if len(payloads) == 0 {
		return
	}
	total := 0
	for _, p := range payloads {
		total += len(p)
	}
	o.payloadSize.Store(int64(total/len(payloads) + 1))
}

// forwardLibfloeLogs sends libfloe's log lines (failed cleanups, skipped expiry rounds)
// to the host's logger at the same level. libfloe takes one callback per process; the
// newest output's logger receives the lines.
func forwardLibfloeLogs(log *service.Logger) {
	err := floe.SetLogger(floe.LogInfo, func(level floe.LogLevel, msg string) {
		switch level {
		case floe.LogError:
			log.Error(msg)
		case floe.LogWarn:
			log.Warn(msg)
		case floe.LogInfo:
			log.Info(msg)
		case floe.LogDebug:
			log.Debug(msg)
		default:
			log.Trace(msg)
		}
	})
	if err != nil {
		log.Warnf("iceberg output: libfloe's log lines cannot be forwarded: %v", err)
	}
}

// partialBatchFlush is the period floe adds to a count-only batch policy.
const partialBatchFlush = "1s"

// guardBatchPolicy gives a batch policy that only a size ends (count or byte_size) a
// period. Without one, messages the input re-delivers after a failed write (fewer than
// a full batch) wait for a batch that never fills: the pipeline hangs with rows
// stranded, and they are lost at shutdown. A period of zero or less never fires, so it
// counts as none. Said once in the log.
func guardBatchPolicy(p service.BatchPolicy, log *service.Logger) service.BatchPolicy {
	if p.Check != "" {
		return p
	}
	if d, err := time.ParseDuration(p.Period); err == nil && d <= 0 {
		log.Warnf("iceberg output: batching.period %s never flushes a batch; treated as unset", p.Period)
		p.Period = ""
	}
	if (p.Count > 1 || p.ByteSize > 0) && p.Period == "" {
		p.Period = partialBatchFlush
		log.Warnf("iceberg output: batching (count %d, byte_size %d) has no batching.period; partial batches (e.g. re-delivered messages) are flushed after %s so none is stranded. Set batching.period to choose.", p.Count, p.ByteSize, partialBatchFlush)
	}
	return p
}

// outage tracks consecutive whole-call failures: the host retries such a batch (it is
// not the messages' fault), floe waits a little longer before each retry, and logs one
// line per cause rather than one per batch.
type outage struct {
	mu       sync.Mutex
	failures int
	lastLog  time.Time
	lastWhat string
}

// failed records a failure and logs it when its cause is new or the last line is old.
func (o *outage) failed(err error, log *service.Logger) {
	o.say(fmt.Sprintf("iceberg output: batch not written, retrying it (it is not routed to a fallback output): %v", err), err, log)
}

// say counts a failure and logs line when its cause (err's status) is new or the last
// line is older than 30 s: an error repeated by every retry is one line, not one per
// batch.
func (o *outage) say(line string, err error, log *service.Logger) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failures++
	what := err.Error()
	var fe *floe.Error
	if errors.As(err, &fe) {
		what = fmt.Sprintf("status %d", fe.Status)
	}
	if what != o.lastWhat || time.Since(o.lastLog) > 30*time.Second {
		log.Error(line)
		o.lastWhat, o.lastLog = what, time.Now()
	}
}

// succeeded ends an outage, saying so if one was logged.
func (o *outage) succeeded(log *service.Logger) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failures > 0 {
		log.Infof("iceberg output: writing again after %d failed attempts", o.failures)
	}
	o.failures, o.lastWhat = 0, ""
}

// backoff is how long to wait before the next retry: 0 without failures, then 250 ms
// doubling up to 10 s.
func (o *outage) backoff() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return backoffAfter(o.failures)
}

// backoffAfter is the wait after n consecutive failures: 0, then 250 ms doubling up to
// 10 s.
func backoffAfter(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return min(250*time.Millisecond<<min(n-1, 6), 10*time.Second)
}

func newOutput(conf *service.ParsedConfig, mgr *service.Resources) (*output, error) {
	rowOpText, err := conf.FieldString(fRowOperation)
	if err != nil {
		return nil, err
	}
	rowOpInterpolated, err := conf.FieldInterpolatedString(fRowOperation)
	if err != nil {
		return nil, err
	}
	var rowOp *rowOperation
	if op, static := rowOpInterpolated.Static(); !static || !strings.EqualFold(strings.TrimSpace(op), "insert") {
		rowOp = newRowOperation(rowOpText, rowOpInterpolated)
	}
	cfg, err := checkedConfig(conf)
	if err != nil {
		return nil, err
	}
	ns, err := conf.FieldInterpolatedString(fNamespace)
	if err != nil {
		return nil, err
	}
	tbl, err := conf.FieldInterpolatedString(fTable)
	if err != nil {
		return nil, err
	}
	var source, offset *service.InterpolatedString
	if conf.Contains(fCommit, "exactly_once") {
		if source, err = conf.FieldInterpolatedString(fCommit, "exactly_once", "source"); err != nil {
			return nil, err
		}
		if offset, err = conf.FieldInterpolatedString(fCommit, "exactly_once", "offset"); err != nil {
			return nil, err
		}
		if raw, err := conf.FieldString(fCommit, "exactly_once", "source"); err == nil && !strings.Contains(strings.ToLower(raw), "partition") {
			mgr.Logger().Warnf("iceberg output: commit.exactly_once.source %q names no partition; offsets repeat across a topic's partitions, so a source must name one (e.g. '${! meta(\"kafka_topic\") }/${! meta(\"kafka_partition\") }'). Messages repeating a committed position are acknowledged without being written.", raw)
		}
	}
	var typeMapping *bloblang.Executor
	if conf.Contains(fEvolution, "new_column_type_mapping") {
		if typeMapping, err = conf.FieldBloblang(fEvolution, "new_column_type_mapping"); err != nil {
			return nil, err
		}
	}
	typesMeta, _ := conf.FieldString(fEvolution, "schema_metadata")
	requireMeta, _ := conf.FieldBool(fEvolution, "require_schema_metadata")
	caseSensitive := true
	if conf.Contains(fCaseSensitive) {
		caseSensitive, _ = conf.FieldBool(fCaseSensitive)
	}
	progress, err := conf.FieldDuration(fProgress)
	if err != nil {
		return nil, err
	}
	permanent, err := conf.FieldString(fPermanent)
	if err != nil {
		return nil, err
	}
	evolves := false
	if conf.Contains(fEvolution, "enabled") {
		evolves, _ = conf.FieldBool(fEvolution, "enabled")
	}
	maxBytes, err := conf.FieldInt(fMaxInFlightBytes)
	if err != nil {
		return nil, err
	}
	processBytes, err := conf.FieldInt(fMaxProcessInFlightBytes)
	if err != nil {
		return nil, err
	}
	if inForce := processGate.lowerTo(int64(processBytes)); processBytes > 0 && inForce != int64(processBytes) {
		mgr.Logger().Infof("iceberg output: %s is %d, but another output of the process set %d: the smallest holds for all", fMaxProcessInFlightBytes, processBytes, inForce)
	}
	atomicTables := false
	if conf.Contains(fCommit, "atomic_tables") {
		atomicTables, _ = conf.FieldBool(fCommit, "atomic_tables")
	}
	forwardLibfloeLogs(mgr.Logger())
	o := &output{
		gate:          newByteGate(int64(maxBytes)),
		permanent:     permanent,
		evolves:       evolves,
		typesMeta:     typesMeta,
		requireMeta:   requireMeta,
		caseSensitive: caseSensitive,
		typeMapping:   typeMapping,
		configJSON:    cfg,
		namespace:     ns,
		table:         tbl,
		rowOp:         rowOp,
		ordered:       rowOp != nil || atomicTables,
		source:        source,
		offset:        offset,
		log:           mgr.Logger(),
		metrics:       newMetrics(mgr.Metrics()),
	}
	o.fixedTable = o.staticTable()
	o.metrics.zeroes(o.fixedTable)
	o.done = make(chan struct{})
	if progress > 0 {
		go o.progress(progress, o.done)
	}
	return o, nil
}

func (o *output) Connect(ctx context.Context) error {
	// After a failed write the host calls Connect before retrying: the backoff is here.
	if d := o.outage.backoff(); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := o.open(); err != nil {
		return o.openFailed(ctx, err)
	}
	return nil
}

// open opens libfloe's writer unless it is open. Its error is kept for write calls.
func (o *output) open() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.writer != nil {
		return nil
	}
	w, err := floe.Open(o.configJSON)
	if err != nil {
		// A plain error: the host logs it (which URL, what failed) and retries with
		// backoff. Wrapping ErrNotConnected would lose the message.
		o.openErr = fmt.Errorf("iceberg output cannot open libfloe: %w", err)
		return o.openErr
	}
	o.writer, o.openErr = w, nil
	o.log.Infof("iceberg output connected")
	return nil
}

// tableNames evaluates each message's namespace and table, or nil, nil when both are
// static (the config JSON already carries them). A message whose interpolation fails
// names no table: it fails alone.
func (o *output) tableNames(batch service.MessageBatch, failures []error) (ns, tbl []string) {
	_, nsStatic := o.namespace.Static()
	_, tblStatic := o.table.Static()
	if nsStatic && tblStatic {
		return nil, nil
	}
	ns = make([]string, len(batch))
	tbl = make([]string, len(batch))
	for i, m := range batch {
		var err error
		if ns[i], err = o.namespace.TryString(m); err != nil {
			failures[i] = fmt.Errorf("message %d: namespace interpolation: %w", i, err)
		} else if tbl[i], err = o.table.TryString(m); err != nil {
			failures[i] = fmt.Errorf("message %d: table interpolation: %w", i, err)
		}
	}
	return ns, tbl
}

// operations evaluates each message's row operation (nil when all are inserts); libfloe
// checks the names, so a message with an unknown one fails alone, as does one whose
// interpolation fails.
func (o *output) operations(batch service.MessageBatch, failures []error) []string {
	if o.rowOp == nil {
		return nil
	}
	ops := make([]string, len(batch))
	for i, m := range batch {
		op, err := o.rowOp.of(m)
		if err != nil {
			failures[i] = fmt.Errorf("message %d: row_operation interpolation: %w", i, err)
			continue
		}
		ops[i] = strings.ToLower(strings.TrimSpace(op))
	}
	return ops
}

// staticTable is the table as `namespace.table` when neither is interpolated, else "".
func (o *output) staticTable() string {
	ns, nsStatic := o.namespace.Static()
	tbl, tblStatic := o.table.Static()
	if !nsStatic || !tblStatic {
		return ""
	}
	return ns + "." + tbl
}

// messageTable is one message's table as `namespace.table` ("" when its interpolation
// fails), for the table label of its failure.
func (o *output) messageTable(m *service.Message) string {
	ns, err := o.namespace.TryString(m)
	if err != nil {
		return ""
	}
	tbl, err := o.table.TryString(m)
	if err != nil {
		return ""
	}
	return ns + "." + tbl
}

// positions evaluates each message's exactly-once source and offset (nil, nil when
// exactly-once is off). A message whose position cannot be read (an interpolation that
// fails, an offset that is not an integer, as when the metadata it names is missing)
// could never be acknowledged safely: it fails alone.
func (o *output) positions(batch service.MessageBatch, failures []error) ([]string, []int64) {
	if o.source == nil {
		return nil, nil
	}
	sources := make([]string, len(batch))
	offsets := make([]int64, len(batch))
	for i, m := range batch {
		var err error
		if sources[i], err = o.source.TryString(m); err != nil {
			failures[i] = fmt.Errorf("message %d: exactly_once.source interpolation: %w", i, err)
			continue
		}
		text, err := o.offset.TryString(m)
		if err != nil {
			failures[i] = fmt.Errorf("message %d: exactly_once.offset interpolation: %w", i, err)
			continue
		}
		if offsets[i], err = strconv.ParseInt(strings.TrimSpace(text), 10, 64); err != nil {
			failures[i] = fmt.Errorf("message %d: exactly_once.offset %q is not an integer", i, text)
		}
	}
	return sources, offsets
}

func (o *output) WriteBatch(ctx context.Context, batch service.MessageBatch) error {
	o.metrics.inFlight.Add(1)
	defer o.metrics.inFlight.Add(-1)
	err := o.writeBatch(ctx, batch)
	o.finished(batch, err, ctx.Err() != nil)
	o.metrics.failedWhole(o.fixedTable, len(batch), err, ctx.Err() != nil)
	return err
}

func (o *output) writeBatch(ctx context.Context, batch service.MessageBatch) error {
	o.mu.RLock()
	w := o.writer
	o.mu.RUnlock()
	if w == nil {
		// Connect left it closed for a permanent error: open again (it may be fixed),
		// else fail the call with the error.
		if err := o.open(); err != nil {
			o.metrics.openFailed(err)
			if o.givesUp(err) {
				return o.permanentFailure(ctx, err)
			}
			return service.ErrNotConnected
		}
		o.mu.RLock()
		w = o.writer
		o.mu.RUnlock()
	}
	// failures[i] != nil: message i failed, through its own fault, before or in the call.
	failures := make([]error, len(batch))
	payloads := encodePayloads(batch, len(batch)*int(o.payloadSize.Load()), failures)
	o.rememberPayloadSize(payloads)
	// Before the call's ticket: a call that holds bytes never waits for a later one.
	held, err := o.gate.enter(ctx, payloadBytes(payloads))
	if err != nil {
		return err
	}
	o.metrics.inFlightBytes.Set(o.gate.inUse())
	defer func() {
		o.gate.leave(held)
		o.metrics.inFlightBytes.Set(o.gate.inUse())
	}()
	// After the output's own gate (see processGate).
	heldInProcess, err := processGate.enter(ctx, payloadBytes(payloads))
	if err != nil {
		return err
	}
	o.metrics.processInFlightBytes.Set(processGate.inUse())
	defer func() {
		processGate.leave(heldInProcess)
		o.metrics.processInFlightBytes.Set(processGate.inUse())
	}()
	ns, tbl := o.tableNames(batch, failures)
	sources, offsets := o.positions(batch, failures)
	ops := o.operations(batch, failures)
	full := floe.Batch{Messages: payloads, Namespaces: ns, Tables: tbl, Operations: ops, Sources: sources, Offsets: offsets, Types: o.types(batch, failures)}
	if o.ordered {
		// Upserts and deletes: the call keeps its place in arrival order through every
		// retry, so each key's operations apply in the order the host handed the batches
		// over, whichever of the calls in flight finishes first. Batches whose tables
		// commit together keep it too: each table then meets their transactions in one
		// order, so none waits for a later one.
		full.Call = w.Arrive()
		defer w.Depart(full.Call)
	}
	// Only the messages that are fit to write reach libfloe (usually all of them).
	fit := fitMessages(failures)
	if fit == nil {
		called, err := o.write(ctx, w, full)
		if err != nil {
			return err
		}
		return o.batchError(batch, called)
	}
	if len(fit) > 0 {
		called, err := o.write(ctx, w, subset(full, fit))
		if err != nil {
			return err
		}
		for j, i := range fit {
			failures[i] = renumbered(called[j], j, i)
		}
	}
	return o.batchError(batch, failures)
}

// fitMessages is the indices of the messages that have not failed, or nil when none has.
func fitMessages(failures []error) []int {
	for i, f := range failures {
		if f == nil {
			continue
		}
		fit := make([]int, 0, len(failures)-1)
		for k := range i {
			fit = append(fit, k)
		}
		for k := i + 1; k < len(failures); k++ {
			if failures[k] == nil {
				fit = append(fit, k)
			}
		}
		return fit
	}
	return nil
}

// write hands one batch to libfloe and retries, in this call, its messages that failed
// through no fault of their own. It returns each message's failure (nil: committed), or
// an error for the whole batch: ErrNotConnected during an outage (the host retries the
// batch after Connect), or cancellation.
func (o *output) write(ctx context.Context, w *floe.Writer, b floe.Batch) ([]error, error) {
	res, err := o.writeWhole(ctx, w, b)
	if err != nil {
		return nil, err
	}
	failures, err := o.retryNotAtFault(ctx, w, b, res.Failures)
	o.metrics.takeEvents(w)
	if err != nil {
		return nil, err
	}
	o.metrics.committed(b, o.fixedTable, failures)
	o.outage.succeeded(o.log)
	return failures, nil
}

// call is one write call to libfloe, timed by outcome.
func (o *output) call(ctx context.Context, w *floe.Writer, b floe.Batch) (*floe.Result, error) {
	start := nowNanos()
	res, err := w.Write(ctx, b)
	o.metrics.call(time.Duration(nowNanos()-start), err)
	return res, err
}

// writeWhole hands one batch to libfloe, retrying it while it fails as a whole for a
// reason not of its making (an ordered call here, keeping its place; others through
// the host).
func (o *output) writeWhole(ctx context.Context, w *floe.Writer, b floe.Batch) (*floe.Result, error) {
	for attempt := 1; ; attempt++ {
		res, err := o.call(ctx, w, b)
		if err == nil {
			return res, nil
		}
		o.metrics.takeEvents(w)
		if o.givesUp(err) {
			// Nothing was committed: the host gets the error for the whole batch.
			return nil, o.permanentFailure(ctx, err)
		}
		if !retryWhole(err) {
			return nil, err
		}
		// Storage, catalog, auth, conflicts, unknown outcomes, and nothing was
		// committed: not the messages' fault.
		o.outage.failed(err, o.log)
		if b.Call == 0 {
			// ErrNotConnected makes the host retry this batch (after Connect, which
			// backs off) instead of nacking it into a fallback output.
			return nil, service.ErrNotConnected
		}
		// An ordered call is retried here, under its ticket: handed back to the host it
		// would come again as a new call, after calls that arrived after it.
		select {
		case <-time.After(backoffAfter(attempt)):
		case <-ctx.Done():
			return nil, fmt.Errorf("iceberg output stopped while retrying a batch: %w", ctx.Err())
		}
	}
}

// types gives each message's explicit column types (see `schema_metadata` and
// `new_column_type_mapping`), or nil when neither is configured. A message whose types
// cannot be had (required metadata missing, a mapping that fails or gives no object)
// fails alone, saying why, in failures. The mapping's paths win over the metadata's,
// matched as columns are (any case with case_sensitive_columns: false).
func (o *output) types(batch service.MessageBatch, failures []error) [][]byte {
	if o.typesMeta == "" && o.typeMapping == nil {
		return nil
	}
	out := make([][]byte, len(batch))
	for i, m := range batch {
		merged := map[string]any{}
		if o.typesMeta != "" {
			raw, ok := m.MetaGet(o.typesMeta)
			switch {
			case !ok && o.requireMeta:
				failures[i] = fmt.Errorf("message %d: no schema metadata %q, which require_schema_metadata asks for", i, o.typesMeta)
				continue
			case ok && o.typeMapping == nil:
				out[i] = []byte(raw)
				continue
			case ok:
				var fromMeta map[string]any
				if err := json.Unmarshal([]byte(raw), &fromMeta); err != nil || fromMeta == nil {
					out[i] = []byte(raw) // libfloe refuses it, saying why
					continue
				}
				merged = fromMeta
			}
		}
		if o.typeMapping != nil {
			mapped, err := o.mappedTypes(m)
			if err != nil {
				failures[i] = fmt.Errorf("message %d: %w", i, err)
				continue
			}
			for k, v := range mapped {
				if !o.caseSensitive {
					for old := range merged {
						if strings.EqualFold(old, k) {
							delete(merged, old)
						}
					}
				}
				merged[k] = v
			}
		}
		if len(merged) > 0 {
			out[i], _ = json.Marshal(merged)
		}
	}
	return out
}

// mappedTypes is new_column_type_mapping's object for a message (nil when the mapping
// deletes the message's result).
func (o *output) mappedTypes(m *service.Message) (map[string]any, error) {
	res, err := m.BloblangQuery(o.typeMapping)
	if err != nil {
		return nil, fmt.Errorf("new_column_type_mapping failed: %w", err)
	}
	if res == nil {
		return nil, nil
	}
	mapped, err := res.AsStructured()
	obj, isObject := mapped.(map[string]any)
	if err != nil || !isObject {
		return nil, errors.New("new_column_type_mapping must give an object of field path → type")
	}
	return obj, nil
}

// retryNotAtFault retries, in this call, the messages that failed for a reason not of
// their making (a table of a multi-table batch whose commit failed, a position another
// call was committing): the rest of the batch is committed, so handing the whole batch
// back to the host would write it twice. It returns once only messages at fault
// (StatusData) remain failed, or the host stops (ctx), which nacks the whole batch.
func (o *output) retryNotAtFault(ctx context.Context, w *floe.Writer, full floe.Batch, failures []error) ([]error, error) {
	// settled[i]: message i fails to the host with its error (a permanent error under
	// permanent_errors fail, or held back behind one), retried no more.
	settled := make([]bool, len(failures))
	for attempt := 0; ; attempt++ {
		if cause := o.permanentAmong(failures, settled); cause != nil {
			if o.permanent == permanentStop {
				o.permanentFailure(ctx, cause)
				// Nothing is acknowledged: the host stops, its input delivers the batch
				// again after the restart.
				return nil, service.ErrNotConnected
			}
			// These messages fail, each with its error (those held back behind the
			// refused one too, so none commits out of its order), and the host gets
			// them once the others are written.
			o.permanentFailure(ctx, cause)
			for i, f := range failures {
				settled[i] = settled[i] || (f != nil && (o.givesUp(f) || heldBack(f)))
			}
		}
		var retry []int
		for i, f := range failures {
			if f != nil && !atFault(f) && !settled[i] {
				retry = append(retry, i)
			}
		}
		if len(retry) == 0 {
			return failures, nil
		}
		o.outage.failed(failures[retry[0]], o.log)
		// This call's own backoff: other calls succeeding meanwhile do not reset it.
		select {
		case <-time.After(backoffAfter(attempt + 1)):
		case <-ctx.Done():
			return nil, fmt.Errorf("iceberg output stopped while retrying %d messages: %w", len(retry), ctx.Err())
		}
		res, err := o.call(ctx, w, subset(full, retry))
		if err != nil {
			if retryWhole(err) {
				for _, i := range retry {
					failures[i] = err
				}
				continue
			}
			return nil, err
		}
		// The messages it commits are counted by operation once the batch is done.
		for j, i := range retry {
			failures[i] = renumbered(res.Failures[j], j, i)
		}
	}
}

// heldBack tells whether a message failed only because one before it could not commit
// (libfloe says "held back behind …").
func heldBack(err error) bool {
	var fe *floe.Error
	return errors.As(err, &fe) && strings.Contains(fe.Message, "held back behind")
}

// permanentAmong is the first failure not yet settled that the output gives up on (see
// givesUp), nil when there is none.
func (o *output) permanentAmong(failures []error, settled []bool) error {
	for i, f := range failures {
		if f != nil && !settled[i] && o.givesUp(f) {
			return f
		}
	}
	return nil
}

// givesUp tells whether a failure is permanent (isPermanent) and not retried under
// permanent_errors. A missing table is permanent only without schema evolution: with
// it, the next call creates the table (another tool dropped it).
func (o *output) givesUp(err error) bool {
	if o.permanent == permanentRetry || !isPermanent(err) {
		return false
	}
	var fe *floe.Error
	return !(o.evolves && errors.As(err, &fe) && fe.Status == floe.StatusNotFound)
}

// renumbered gives a failure of message j of a call on part of a batch the index the
// message has in the batch: libfloe names the message by its place in the call.
func renumbered(err error, j, i int) error {
	var fe *floe.Error
	if j == i || !errors.As(err, &fe) {
		return err
	}
	prefix := fmt.Sprintf("message %d:", j)
	if !strings.HasPrefix(fe.Message, prefix) {
		return err
	}
	moved := *fe
	moved.Message = fmt.Sprintf("message %d:", i) + fe.Message[len(prefix):]
	return &moved
}

// atFault tells whether a message failed for a reason of its own (replaying it fails
// again), so it may go to a fallback output.
func atFault(err error) bool {
	var fe *floe.Error
	return errors.As(err, &fe) && fe.Status == floe.StatusData
}

// subset is the batch of messages idx of b.
func subset(b floe.Batch, idx []int) floe.Batch {
	pickS := func(v []string) []string {
		if v == nil {
			return nil
		}
		out := make([]string, len(idx))
		for j, i := range idx {
			out[j] = v[i]
		}
		return out
	}
	out := floe.Batch{Namespaces: pickS(b.Namespaces), Tables: pickS(b.Tables), Operations: pickS(b.Operations), Sources: pickS(b.Sources), Call: b.Call}
	out.Messages = make([][]byte, len(idx))
	for j, i := range idx {
		out.Messages[j] = b.Messages[i]
	}
	if b.Offsets != nil {
		out.Offsets = make([]int64, len(idx))
		for j, i := range idx {
			out.Offsets[j] = b.Offsets[i]
		}
	}
	if b.Types != nil {
		out.Types = make([][]byte, len(idx))
		for j, i := range idx {
			out.Types[j] = b.Types[i]
		}
	}
	return out
}

// batchError names the messages that failed through their own fault, or nil.
func (o *output) batchError(batch service.MessageBatch, failures []error) error {
	var batchErr *service.BatchError
	failed := 0
	for _, f := range failures {
		if f != nil {
			failed++
		}
	}
	if failed == 0 {
		return nil
	}
	for i, f := range failures {
		if f == nil {
			continue
		}
		o.metrics.failedMessage(o.messageTable(batch[i]), f)
		o.messages.failed(o.log, i, len(batch), f, payloadOf(batch[i]))
		if batchErr == nil {
			batchErr = service.NewBatchError(batch, fmt.Errorf("%d of %d messages failed: %w", failed, len(batch), f))
		}
		batchErr = batchErr.Failed(i, f)
	}
	return batchErr
}

// payloadOf is a message's bytes for a log line (nil when it has none).
func payloadOf(m *service.Message) []byte {
	b, err := m.AsBytes()
	if err != nil {
		return nil
	}
	return b
}

// retryWhole tells whether a failed call should be retried as a whole by the host: every
// libfloe failure except cancellation (the host is stopping) and a malformed call.
func retryWhole(err error) bool {
	var fe *floe.Error
	if !errors.As(err, &fe) {
		return false
	}
	return fe.Status != floe.StatusCancelled && fe.Status != floe.StatusInvalidArgument
}

func (o *output) Close(ctx context.Context) error {
	o.closeOnce.Do(func() { close(o.done) })
	o.reportUnwritten()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.writer != nil {
		// Commits that landed since the last drain (calls cut short at shutdown).
		o.metrics.takeEvents(o.writer)
		o.logStats()
		err := o.writer.Close()
		o.writer = nil
		return err
	}
	return nil
}

// logStats reports what this output committed: the line a user (or the bench sweep)
// reads after a run to see commits, files and commit latency.
func (o *output) logStats() {
	st, err := o.writer.Stats()
	if err != nil {
		o.log.Warnf("iceberg output stats unavailable: %v", err)
		return
	}
	o.log.Infof("iceberg output committed rows=%d snapshots=%d data_files=%d data_bytes=%d commit_p50_ms=%.1f commit_p95_ms=%.1f commit_max_ms=%.1f write_p50_ms=%.1f catalog_p50_ms=%.1f",
		st.Rows, st.Snapshots, st.DataFiles, st.DataBytes, ms(st.CommitP50), ms(st.CommitP95), ms(st.CommitMax),
		ms(st.WriteP50), ms(st.CatalogP50))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
