//! Where floe puts the files it writes: the table's data location, a folder per
//! partition field (`name=value`), then the file's name.
//!
//! iceberg-rust's default generator puts a partition value into the path as it is, so a
//! message whose partition value is `../../x` (or holds a `/`) would have floe write a
//! file outside the table's folder, on a local warehouse outside the warehouse; and a
//! `?` or `#` in it cuts the path short for readers that parse locations as URLs
//! (pyiceberg, Java's S3 paths). Here each value (and field name) is one folder name:
//! every byte but letters, digits and `-._~` is percent-encoded (as Apache Iceberg's
//! Java writer encodes values), a value of `.` or `..` has its dots encoded, and a value
//! too long for a folder name is cut and given a hash of the whole. Readers find files
//! through the manifests, never by these paths.

use std::fmt::Write as _;

use iceberg::spec::{PartitionKey, TableMetadata};
use iceberg::writer::file_writer::location_generator::LocationGenerator;

/// Table properties that move the data folder, in the order Iceberg reads them.
const DATA_LOCATION_PROPERTIES: [&str; 2] = ["write.data.path", "write.folder-storage.path"];

/// The longest escaped value kept whole: folder names are at most 255 bytes on most
/// filesystems, and the field's name and `=` come first.
const MAX_VALUE_BYTES: usize = 160;

/// The locations of a table's new files (see the module docs).
#[derive(Clone, Debug)]
pub struct FileLocations {
    data_location: String,
}

impl FileLocations {
    pub fn new(metadata: &TableMetadata) -> Self {
        let properties = metadata.properties();
        let data_location = DATA_LOCATION_PROPERTIES
            .iter()
            .find_map(|key| properties.get(*key).cloned())
            .unwrap_or_else(|| format!("{}/data", metadata.location()));
        FileLocations { data_location }
    }
}

impl LocationGenerator for FileLocations {
    fn generate_location(&self, partition: Option<&PartitionKey>, file_name: &str) -> String {
        let folders = partition
            .filter(|p| !PartitionKey::is_effectively_none(Some(p)))
            .map(partition_folders);
        match folders {
            Some(folders) => format!("{}/{folders}/{file_name}", self.data_location),
            None => format!("{}/{file_name}", self.data_location),
        }
    }
}

/// `name=value/…` for each field of the partition, every part escaped.
fn partition_folders(partition: &PartitionKey) -> String {
    let spec = partition.spec();
    let Ok(fields) = spec.partition_type(partition.schema()) else {
        // A spec that does not bind to its schema wrote no row; iceberg-rust's own path
        // would panic on it. The values as they are held, escaped.
        return spec
            .fields()
            .iter()
            .zip(partition.data().iter())
            .map(|(field, value)| {
                format!("{}={}", escape(&field.name), escape(&format!("{value:?}")))
            })
            .collect::<Vec<_>>()
            .join("/");
    };
    let mut folders = String::new();
    for (i, field) in spec.fields().iter().enumerate() {
        if i > 0 {
            folders.push('/');
        }
        let value = field
            .transform
            .to_human_string(&fields.fields()[i].field_type, partition.data()[i].as_ref());
        folders.push_str(&escape(&field.name));
        folders.push('=');
        folders.push_str(&escape(&value));
    }
    folders
}

/// `part` as one folder name (see the module docs).
fn escape(part: &str) -> String {
    if part == "." || part == ".." {
        return part.replace('.', "%2E");
    }
    let mut escaped = String::with_capacity(part.len());
    for byte in part.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            escaped.push(byte as char);
        } else {
            let _ = write!(escaped, "%{byte:02X}");
        }
    }
    if escaped.len() <= MAX_VALUE_BYTES {
        return escaped;
    }
    // ASCII only, so any byte is a place to cut, but not inside a `%XX`.
    let mut cut = MAX_VALUE_BYTES - 17;
    if let Some(percent) = escaped[cut.saturating_sub(2)..cut].find('%') {
        cut = cut - 2 + percent;
    }
    format!("{}-{:016x}", &escaped[..cut], fnv1a(part.as_bytes()))
}

/// A stable 64-bit hash (FNV-1a): the same value gets the same folder in every process.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_would_leave_the_folder_stay_in_one_folder_name() {
        assert_eq!(escape("../../etc"), "..%2F..%2Fetc");
        assert_eq!(escape(".."), "%2E%2E");
        assert_eq!(escape("."), "%2E");
        assert_eq!(escape("a\\b"), "a%5Cb");
        assert_eq!(escape("50%"), "50%25");
        assert_eq!(escape("line\nbreak\0"), "line%0Abreak%00");
        // What a URL parser would cut at, or a reader take for a pattern.
        assert_eq!(escape("C#?*[x]"), "C%23%3F%2A%5Bx%5D");
        assert_eq!(escape("a b:c=d"), "a%20b%3Ac%3Dd");
        assert_eq!(escape("ü"), "%C3%BC");
        // What needs no escape is kept as it is.
        for kept in ["2026-12-08", "2026-12-08-01", "-1", "null", "v1.2_x~"] {
            assert_eq!(escape(kept), kept);
        }
    }

    #[test]
    fn a_long_value_is_cut_and_told_apart_by_a_hash() {
        let long = "é".repeat(200);
        let other = format!("{}x", "é".repeat(199));
        let (a, b) = (escape(&long), escape(&other));
        assert!(a.len() <= MAX_VALUE_BYTES, "{}", a.len());
        assert_ne!(a, b);
        assert_eq!(a, escape(&long));
        assert!(!a.contains('/'));
        // Wherever the cut falls, it leaves no `%` without its two digits.
        for offset in 0..6 {
            let value = format!("{}/{}", "a".repeat(140 + offset), "b".repeat(30));
            let escaped = escape(&value);
            let (kept, _hash) = escaped.rsplit_once('-').unwrap();
            let bytes = kept.as_bytes();
            for (i, _) in kept.match_indices('%') {
                assert!(
                    i + 2 < bytes.len() + 1
                        && bytes[i + 1..i + 3].iter().all(u8::is_ascii_hexdigit),
                    "{escaped}"
                );
            }
        }
    }
}
