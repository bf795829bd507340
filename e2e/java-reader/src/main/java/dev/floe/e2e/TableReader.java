package dev.floe.e2e;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.iceberg.MetadataColumns;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.rest.RESTCatalog;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.iceberg.util.SnapshotUtil;

/**
 * Reads Iceberg tables with Apache Iceberg's own Java reader: a RESTCatalog with S3FileIO, and
 * {@code IcebergGenerics.read(table).build()}, which applies position and equality deletes the
 * way the specification's reference implementation does.
 *
 * <p>A server for tests/support/read_table.py (reader {@code java-rest}): one JSON request per
 * stdin line, one JSON answer per stdout line, until stdin closes. A request is
 *
 * <pre>
 *   {"uri": "http://127.0.0.1:port", "table": "ns.name",
 *    "props": {"s3.endpoint": ..., "s3.access-key-id": ..., "s3.secret-access-key": ...,
 *              "s3.region": ..., "s3.path-style-access": "true", ...},
 *    "warehouse": "...",           (optional)
 *    "columns": ["id", "v"],       (optional: a projection, in this order)
 *    "snapshot_id": 123,           (optional: time travel; the snapshot's schema)
 *    "lineage": true}              (optional: each row's _row_id and
 *                                   _last_updated_sequence_number too, as v3 row lineage
 *                                   gives them: the file's value, else inherited)
 * </pre>
 *
 * and the answer {@code {"rows": [{column: value, ...}, ...]}} or {@code {"error": stack
 * trace}}. Values are JSON the way read_table.py's {@code jsonable} makes pyiceberg's: see
 * {@link #value}. Rows come in the reader's order; read_table.py sorts them.
 */
public final class TableReader {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  private static final HexFormat HEX = HexFormat.of();

  private TableReader() {}

  public static void main(String[] argv) throws Exception {
    // Answers go to the real stdout; anything a library prints goes to stderr, so a stray
    // line can never be taken for an answer.
    PrintStream answers =
        new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
    System.setOut(System.err);
    BufferedReader requests =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = requests.readLine()) != null) {
      if (line.isBlank()) {
        continue;
      }
      ObjectNode reply = NODES.objectNode();
      try {
        reply.set("rows", read(JSON.readTree(line)));
      } catch (Throwable t) { // reported to the test, which fails naming the reader
        StringWriter trace = new StringWriter();
        t.printStackTrace(new PrintWriter(trace));
        reply = NODES.objectNode();
        reply.put("error", trace.toString());
      }
      answers.println(JSON.writeValueAsString(reply));
      answers.flush();
    }
  }

  static ArrayNode read(JsonNode request) throws Exception {
    Map<String, String> props = new HashMap<>();
    for (Map.Entry<String, JsonNode> e : request.path("props").properties()) {
      props.put(e.getKey(), e.getValue().asText());
    }
    props.put("uri", request.get("uri").asText());
    if (request.hasNonNull("warehouse")) {
      props.put("warehouse", request.get("warehouse").asText());
    }
    props.putIfAbsent("io-impl", "org.apache.iceberg.aws.s3.S3FileIO");
    // pyiceberg's name for the region is s3.region; Iceberg Java's is client.region.
    props.putIfAbsent("client.region", props.getOrDefault("s3.region", "us-east-1"));

    // A catalog (and its S3 client) per request, as read_table.py loads one per request.
    try (RESTCatalog catalog = new RESTCatalog()) {
      catalog.initialize("rest", props);
      Table table = catalog.loadTable(TableIdentifier.parse(request.get("table").asText()));
      IcebergGenerics.ScanBuilder scan = IcebergGenerics.read(table);
      Schema schema = table.schema();
      if (request.hasNonNull("snapshot_id")) {
        long snapshot = request.get("snapshot_id").asLong();
        scan = scan.useSnapshot(snapshot);
        schema = SnapshotUtil.schemaFor(table, snapshot);
      }
      if (request.hasNonNull("columns")) {
        List<String> columns = new ArrayList<>();
        request.get("columns").forEach(c -> columns.add(c.asText()));
        scan = scan.select(columns.toArray(new String[0]));
        Schema selected = schema.select(columns);
        // In the requested order, not the schema's.
        List<Types.NestedField> fields = new ArrayList<>();
        for (String c : columns) {
          fields.add(selected.findField(c));
        }
        schema = new Schema(fields);
      }
      if (request.path("lineage").asBoolean(false)) {
        List<Types.NestedField> fields = new ArrayList<>(schema.columns());
        fields.add(MetadataColumns.ROW_ID);
        fields.add(MetadataColumns.LAST_UPDATED_SEQUENCE_NUMBER);
        schema = new Schema(fields);
        scan = scan.project(schema);
      }
      ArrayNode rows = NODES.arrayNode();
      // The records the reader returns may carry more columns than asked for (the ones
      // equality deletes compare): only the projection's are answered.
      try (CloseableIterable<Record> records = scan.build()) {
        for (Record record : records) {
          rows.add(struct(schema.asStruct(), record));
        }
      }
      return rows;
    }
  }

  static ObjectNode struct(Types.StructType type, Record record) {
    ObjectNode out = NODES.objectNode();
    for (Types.NestedField field : type.fields()) {
      out.set(field.name(), value(field.type(), record.getField(field.name())));
    }
    return out;
  }

  /**
   * One value as read_table.py's {@code jsonable} makes pyiceberg's (Arrow's to_pylist):
   * integers and longs as numbers, float and double as numbers (a float widened to double, as
   * Arrow's to_pylist does), booleans, strings; decimals as strings, Python's str(Decimal)
   * (BigDecimal.toString follows the same rules: "12.50", "1E-10"); dates, times and
   * timestamps as ISO strings like Python's isoformat (fraction only when non-zero, six
   * digits; timestamptz with "+00:00"); nanosecond timestamps as integers (nanoseconds since
   * the epoch, as read_table.py's nanoseconds_as_integers); uuids as strings; binary and fixed
   * as lower-case hex; structs as objects; lists as arrays; maps as arrays of [key, value]
   * pairs (pyarrow's to_pylist of a map); null as null.
   */
  static JsonNode value(Type type, Object v) {
    if (v == null) {
      return NODES.nullNode();
    }
    switch (type.typeId()) {
      case BOOLEAN:
        return NODES.booleanNode((Boolean) v);
      case INTEGER:
        return NODES.numberNode((Integer) v);
      case LONG:
        return NODES.numberNode((Long) v);
      case FLOAT:
        return NODES.numberNode((double) (Float) v);
      case DOUBLE:
        return NODES.numberNode((Double) v);
      case DECIMAL:
        return NODES.textNode(((BigDecimal) v).toString());
      case STRING:
        return NODES.textNode(v.toString());
      case UUID:
        return NODES.textNode(((UUID) v).toString());
      case DATE:
        return NODES.textNode(((LocalDate) v).toString());
      case TIME:
        return NODES.textNode(isoTime((LocalTime) v));
      case TIMESTAMP:
        if (((Types.TimestampType) type).shouldAdjustToUTC()) {
          OffsetDateTime t = ((OffsetDateTime) v).withOffsetSameInstant(ZoneOffset.UTC);
          return NODES.textNode(isoDateTime(t.toLocalDateTime()) + "+00:00");
        }
        return NODES.textNode(isoDateTime((LocalDateTime) v));
      case TIMESTAMP_NANO:
        LocalDateTime local =
            ((Types.TimestampNanoType) type).shouldAdjustToUTC()
                ? ((OffsetDateTime) v).withOffsetSameInstant(ZoneOffset.UTC).toLocalDateTime()
                : (LocalDateTime) v;
        return NODES.numberNode(
            ChronoUnit.NANOS.between(LocalDateTime.of(1970, 1, 1, 0, 0), local));
      case FIXED:
        return NODES.textNode(HEX.formatHex((byte[]) v));
      case BINARY:
        ByteBuffer buf = ((ByteBuffer) v).duplicate();
        byte[] bytes = new byte[buf.remaining()];
        buf.get(bytes);
        return NODES.textNode(HEX.formatHex(bytes));
      case STRUCT:
        return struct(type.asStructType(), (Record) v);
      case LIST:
        ArrayNode list = NODES.arrayNode();
        Type element = type.asListType().elementType();
        for (Object e : (List<?>) v) {
          list.add(value(element, e));
        }
        return list;
      case MAP:
        ArrayNode pairs = NODES.arrayNode();
        Types.MapType map = type.asMapType();
        for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
          ArrayNode pair = NODES.arrayNode();
          pair.add(value(map.keyType(), e.getKey()));
          pair.add(value(map.valueType(), e.getValue()));
          pairs.add(pair);
        }
        return pairs;
      default:
        return NODES.textNode(v.toString());
    }
  }

  /** Python's time.isoformat(): HH:MM:SS, and .ffffff when the microseconds are not zero. */
  static String isoTime(LocalTime t) {
    String s = String.format("%02d:%02d:%02d", t.getHour(), t.getMinute(), t.getSecond());
    int micros = t.getNano() / 1000;
    return micros == 0 ? s : s + String.format(".%06d", micros);
  }

  /** Python's datetime.isoformat() of a naive datetime. */
  static String isoDateTime(LocalDateTime t) {
    return t.toLocalDate() + "T" + isoTime(t.toLocalTime());
  }
}
