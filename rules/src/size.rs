//! Sizes in bytes, as spool.toml, flags, manifests and the docs write them: `64MiB`,
//! `512 KiB`, `1GiB`, or a plain number of bytes.

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;

/// Parses `"64MiB"`, `"512 KiB"`, `"1GiB"`, `"1048576"`: a whole number and an optional
/// binary unit (`KB`, `MB`, `GB`, `K`, `M` and `G` mean the same). Zero is no size.
pub fn parse_byte_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: usize = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size: write a number with KiB, MiB or GiB"))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "KB" | "K" => KIB,
        "MiB" | "MB" | "M" => MIB,
        "GiB" | "GB" | "G" => GIB,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{text}`: use KiB, MiB or GiB"
            ));
        }
    };
    number
        .checked_mul(factor)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{text}` is not a usable size"))
}

/// A size as [`parse_byte_size`] reads it back: the largest binary unit that divides it
/// (`256MiB`), else bytes.
pub fn show_size(bytes: usize) -> String {
    for (size, unit) in [(GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// A measured size for a person to read: in the largest binary unit it reaches, with one
/// decimal below 10 of it (1114784 → `1.1MiB`, 52428800 → `50MiB`, 900 → `900B`). Unlike
/// [`show_size`], it rounds: for figures, not for settings read back.
pub fn show_measured_size(bytes: u64) -> String {
    for (size, unit) in [(GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        let size = size as u64;
        if bytes >= size {
            let value = bytes as f64 / size as f64;
            return if value < 10.0 {
                format!("{value:.1}{unit}")
            } else {
                format!("{value:.0}{unit}")
            };
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_sizes_round_in_their_largest_unit() {
        assert_eq!(show_measured_size(1_114_784), "1.1MiB");
        assert_eq!(show_measured_size(50 << 20), "50MiB");
        assert_eq!(show_measured_size(65536), "64KiB");
        assert_eq!(show_measured_size(900), "900B");
        assert_eq!(show_measured_size(3 << 30), "3.0GiB");
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_byte_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_byte_size("512 KiB"), Ok(512 << 10));
        assert_eq!(parse_byte_size("1G"), Ok(1 << 30));
        assert_eq!(parse_byte_size("1048576"), Ok(1 << 20));
        assert!(parse_byte_size("0").is_err());
        assert!(
            parse_byte_size("1TB")
                .unwrap_err()
                .contains("unknown size unit `TB`")
        );
        assert!(parse_byte_size("MiB").is_err());
        assert!(parse_byte_size(&format!("{}GiB", usize::MAX)).is_err());
    }

    #[test]
    fn shown_sizes_read_back() {
        for bytes in [1, 1000, 64 << 10, 3 << 20, 256 << 20, 2 << 30] {
            assert_eq!(parse_byte_size(&show_size(bytes)), Ok(bytes), "{bytes}");
        }
        assert_eq!(show_size(256 << 20), "256MiB");
    }
}
