// Parses each argument with parquet-mr's own VersionParser (what Iceberg's Java reader
// uses to decide whether to trust a file's statistics) and prints
// "application<TAB>version", or fails when one does not parse.
import org.apache.parquet.VersionParser;

public class ParseCreatedBy {
    public static void main(String[] args) throws Exception {
        for (String createdBy : args) {
            VersionParser.ParsedVersion v = VersionParser.parse(createdBy);
            System.out.println(v.application + "\t" + v.version);
        }
    }
}
