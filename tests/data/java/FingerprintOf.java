// Java's Avro (the specification's reference implementation) on a schema: its parsing
// fingerprint and canonical form, and, given a datum as JSON, the single-object encoded bytes
// a Java producer writes with Avro's own BinaryMessageEncoder. A test compares them with
// streamctl's. Run with `java -cp <avro classpath> FingerprintOf.java FILE.avsc [DATUM.json]`.
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.message.BinaryMessageEncoder;

public class FingerprintOf {
  public static void main(String[] args) throws Exception {
    Schema schema = new Schema.Parser().parse(Files.readString(Path.of(args[0])));
    System.out.println(SchemaNormalization.parsingFingerprint64(schema));
    System.out.println(SchemaNormalization.toParsingForm(schema));
    if (args.length > 1) {
      GenericData.Record datum = new GenericDatumReader<GenericData.Record>(schema).read(null,
          DecoderFactory.get().jsonDecoder(schema, Files.readString(Path.of(args[1]))));
      byte[] bytes = new BinaryMessageEncoder<GenericData.Record>(GenericData.get(), schema)
          .encode(datum).array();
      System.out.println(HexFormat.of().formatHex(bytes));
    }
  }
}
