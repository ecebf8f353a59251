//! What an image costs: the providers' image-token rules, and the size of an inline image read
//! from its header.
//!
//! The rules, as the providers document them (2025):
//!
//! - **OpenAI tiles** (GPT-4o, GPT-4.1, GPT-5, o1/o3): the image is scaled to fit 2048 × 2048,
//!   then its shortest side to 768 px; it costs `base + per_tile × (number of 512-px tiles)`
//!   (GPT-4o: 85 + 170 per tile), or only `base` with `"detail": "low"`.
//! - **OpenAI patches** (GPT-4.1 mini/nano, o4-mini, GPT-5 mini/nano): the number of 32-px
//!   patches, capped at 1,536, times a per-model multiplier.
//! - **Pixel area** (Anthropic): `width × height / 750`, after scaling the long edge down to
//!   1,568 px, capped at about 1,600 tokens.
//! - **Flat** (everyone else, e.g. Gemini's 258 per image): the same count for every image.
//!
//! The message model rarely knows an image's size. For inline images (base64 or a `data:` URL)
//! the size is read from the PNG, GIF, WebP or JPEG header; for anything else (an http URL, an
//! archived reference, an unknown format) the rule is applied to [`DEFAULT_IMAGE_SIZE`].
//!
//! ```
//! use ctxkeeper_core::tokens::ImageRule;
//!
//! let gpt4o = ImageRule::OpenAiTiles { base: 85, per_tile: 170 };
//! assert_eq!(gpt4o.tokens(Some((1024, 1024)), false), 765); // 768 × 768: 4 tiles
//! assert_eq!(gpt4o.tokens(Some((1024, 1024)), true), 85); // detail: low
//! let claude = ImageRule::PixelArea { pixels_per_token: 750, max_tokens: 1_600 };
//! assert_eq!(claude.tokens(Some((200, 200)), false), 54);
//! ```

use serde::{Deserialize, Serialize};

use crate::model::DataSource;

/// The size assumed for an image whose size is unknown: 1024 × 1024 (765 tokens for GPT-4o,
/// ~1,400 for Claude).
pub const DEFAULT_IMAGE_SIZE: (u32, u32) = (1024, 1024);

/// How a model counts the tokens of one image.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum ImageRule {
    /// OpenAI's tile rule: `base + per_tile × tiles` of 512 px after scaling to fit 2048 × 2048
    /// and the shortest side to 768; `base` alone at low detail.
    OpenAiTiles {
        /// Tokens every image costs.
        base: u32,
        /// Tokens per 512 × 512 tile.
        per_tile: u32,
    },
    /// OpenAI's patch rule: 32 × 32 patches, at most 1,536, times `multiplier`.
    OpenAiPatches {
        /// The model's multiplier (GPT-4.1 mini 1.62, nano 2.46, o4-mini 1.72).
        multiplier: f64,
    },
    /// Anthropic's rule: `width × height / pixels_per_token`, the long edge scaled to at most
    /// 1,568 px, at most `max_tokens`.
    PixelArea {
        /// Pixels per token (750 for Claude).
        pixels_per_token: u32,
        /// The most one image can cost (about 1,600 for Claude).
        max_tokens: u32,
    },
    /// Every image costs the same.
    Flat {
        /// Tokens per image.
        tokens: u32,
    },
}

impl ImageRule {
    /// Tokens of one image of `size` (width, height) in pixels, or of [`DEFAULT_IMAGE_SIZE`]
    /// when the size is unknown. `low_detail` is OpenAI's `"detail": "low"`, which only the
    /// tile rule honours.
    pub fn tokens(&self, size: Option<(u32, u32)>, low_detail: bool) -> u32 {
        let (width, height) = size.unwrap_or(DEFAULT_IMAGE_SIZE);
        let (width, height) = (f64::from(width.max(1)), f64::from(height.max(1)));
        match *self {
            ImageRule::OpenAiTiles { base, per_tile } => {
                if low_detail {
                    return base;
                }
                // Fit within 2048 × 2048, then scale the shortest side down to 768.
                let fit = (2048.0 / width.max(height)).min(1.0);
                let (w, h) = (width * fit, height * fit);
                let shrink = (768.0 / w.min(h)).min(1.0);
                let (w, h) = (w * shrink, h * shrink);
                let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
                to_u32(f64::from(base) + f64::from(per_tile) * tiles)
            }
            ImageRule::OpenAiPatches { multiplier } => {
                const PATCH: f64 = 32.0;
                const MAX_PATCHES: f64 = 1536.0;
                // Allow for float noise: 1408.000001 px is 44 patches, not 45.
                let count = |pixels: f64| (pixels / PATCH - 1e-6).ceil();
                let mut patches = count(width) * count(height);
                if patches > MAX_PATCHES {
                    // Shrink to fit the patch budget, then to a whole number of patches wide.
                    let shrink = (PATCH * PATCH * MAX_PATCHES / (width * height)).sqrt();
                    let (w, h) = (width * shrink, height * shrink);
                    let whole = (w / PATCH).floor() / (w / PATCH);
                    let (w, h) = (w * whole, h * whole);
                    patches = (count(w) * count(h)).min(MAX_PATCHES);
                }
                let multiplier = if multiplier.is_finite() && multiplier > 0.0 {
                    multiplier
                } else {
                    1.0
                };
                to_u32((patches * multiplier).ceil())
            }
            ImageRule::PixelArea {
                pixels_per_token,
                max_tokens,
            } => {
                const LONG_EDGE: f64 = 1568.0;
                let fit = (LONG_EDGE / width.max(height)).min(1.0);
                let area = width * fit * height * fit;
                let tokens = (area / f64::from(pixels_per_token.max(1))).ceil();
                to_u32(tokens).min(max_tokens)
            }
            ImageRule::Flat { tokens } => tokens,
        }
    }

    /// Tokens of an image of unknown size.
    pub fn default_tokens(&self) -> u32 {
        self.tokens(None, false)
    }
}

fn to_u32(value: f64) -> u32 {
    // Float-to-int `as` saturates and maps NaN to 0.
    value as u32
}

/// The width and height of an inline image, read from its PNG, GIF, WebP or JPEG header;
/// `None` for a URL, an archived reference, or anything unrecognised.
pub fn image_size(source: &DataSource) -> Option<(u32, u32)> {
    let payload = match source {
        DataSource::Base64 { data, .. } => data.as_str(),
        DataSource::Url { url } => {
            let rest = url.strip_prefix("data:")?;
            let (meta, data) = rest.split_once(',')?;
            if !meta.ends_with(";base64") {
                return None;
            }
            data
        }
        DataSource::Archived { .. } => return None,
    };
    // Enough for every PNG, GIF and WebP header, and for JPEGs whose EXIF block is not huge.
    let head = decode_base64_prefix(payload, 64 * 1024);
    sniff_size(&head)
}

/// Decodes at most `max_bytes` bytes from the start of a base64 text (standard or URL-safe
/// alphabet, whitespace ignored), stopping at padding or at the first invalid character.
fn decode_base64_prefix(text: &str, max_bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(max_bytes.min(text.len() / 4 * 3 + 3));
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for byte in text.bytes() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b' ' | b'\n' | b'\r' | b'\t' => continue,
            _ => break,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            if out.len() >= max_bytes {
                break;
            }
        }
    }
    out
}

fn sniff_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let be16 = |at: usize| -> Option<u32> {
        Some(u32::from(u16::from_be_bytes([
            *bytes.get(at)?,
            *bytes.get(at + 1)?,
        ])))
    };
    let le16 = |at: usize| -> Option<u32> {
        Some(u32::from(u16::from_le_bytes([
            *bytes.get(at)?,
            *bytes.get(at + 1)?,
        ])))
    };
    let le24 = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes([
            *bytes.get(at)?,
            *bytes.get(at + 1)?,
            *bytes.get(at + 2)?,
            0,
        ]))
    };
    let be32 = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let size = if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        (be32(16)?, be32(20)?)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        (le16(6)?, le16(8)?)
    } else if bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP") {
        match bytes.get(12..16)? {
            b"VP8 " => (le16(26)? & 0x3FFF, le16(28)? & 0x3FFF),
            b"VP8L" => {
                let bits = u32::from_le_bytes(bytes.get(21..25)?.try_into().ok()?);
                ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
            }
            b"VP8X" => (le24(24)? + 1, le24(27)? + 1),
            _ => return None,
        }
    } else if bytes.starts_with(&[0xFF, 0xD8]) {
        jpeg_size(bytes, be16)?
    } else {
        return None;
    };
    (size.0 > 0 && size.1 > 0).then_some(size)
}

/// Walks the JPEG segments to the first start-of-frame marker.
fn jpeg_size(bytes: &[u8], be16: impl Fn(usize) -> Option<u32>) -> Option<(u32, u32)> {
    let mut at = 2;
    loop {
        // Skip fill bytes before a marker.
        while *bytes.get(at)? == 0xFF && *bytes.get(at + 1)? == 0xFF {
            at += 1;
        }
        if *bytes.get(at)? != 0xFF {
            return None;
        }
        let marker = *bytes.get(at + 1)?;
        match marker {
            // Standalone markers without a length.
            0xD0..=0xD9 | 0x01 => at += 2,
            // Start of frame (not DHT 0xC4, JPG 0xC8 or DAC 0xCC): height, then width.
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                return Some((be16(at + 7)?, be16(at + 5)?));
            }
            _ => at += 2 + usize::try_from(be16(at + 2)?).ok()?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..=chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        while !out.len().is_multiple_of(4) {
            out.push('=');
        }
        out
    }

    fn png(width: u32, height: u32) -> Vec<u8> {
        let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        bytes.extend(width.to_be_bytes());
        bytes.extend(height.to_be_bytes());
        bytes.extend([8, 6, 0, 0, 0]);
        bytes
    }

    fn inline(bytes: &[u8]) -> DataSource {
        DataSource::Base64 {
            media_type: "image/png".into(),
            data: base64(bytes),
        }
    }

    /// Asserts the tokens `rule` counts for each (width, height) at full detail.
    fn assert_costs(rule: ImageRule, cases: &[((u32, u32), u32)]) {
        for &(size, tokens) in cases {
            assert_eq!(rule.tokens(Some(size), false), tokens, "{rule:?} {size:?}");
        }
    }

    #[test]
    fn openai_tiles_follow_the_documented_examples() {
        let rule = ImageRule::OpenAiTiles {
            base: 85,
            per_tile: 170,
        };
        // OpenAI's worked examples: 1024² → 765; 2048 × 4096 → 1105; 4096 × 8192 low → 85.
        assert_costs(
            rule,
            &[((1024, 1024), 765), ((2048, 4096), 1105), ((100, 100), 255)],
        );
        assert_eq!(rule.tokens(Some((4096, 8192)), true), 85);
        assert_eq!(rule.default_tokens(), 765);
    }

    #[test]
    fn openai_patches_follow_the_documented_examples() {
        let rule = ImageRule::OpenAiPatches { multiplier: 1.0 };
        // OpenAI's worked examples: 1024 × 1024 → 1024 patches; 1800 × 2400 → 1452 patches.
        assert_costs(rule, &[((1024, 1024), 1024), ((1800, 2400), 1452)]);
        let mini = ImageRule::OpenAiPatches { multiplier: 1.62 };
        assert_costs(mini, &[((1024, 1024), 1659)]);
    }

    #[test]
    fn pixel_area_scales_long_images_and_caps() {
        let rule = ImageRule::PixelArea {
            pixels_per_token: 750,
            max_tokens: 1_600,
        };
        let cases = [
            ((1000, 1000), 1334),
            ((1092, 1092), 1590),
            ((8000, 8000), 1600),
            ((0, 0), 1),
        ];
        assert_costs(rule, &cases);
        let broken = ImageRule::PixelArea {
            pixels_per_token: 0,
            max_tokens: 10,
        };
        assert_eq!(broken.default_tokens(), 10);
    }

    #[test]
    fn reads_sizes_from_inline_headers() {
        assert_eq!(image_size(&inline(&png(640, 480))), Some((640, 480)));
        let url = format!("data:image/png;base64,{}", base64(&png(3, 7)));
        assert_eq!(image_size(&DataSource::Url { url }), Some((3, 7)));
        let gif = b"GIF89a\x40\x01\xf0\x00\0\0\0";
        assert_eq!(image_size(&inline(gif)), Some((320, 240)));
        let mut webp = b"RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0\0\0\0\0".to_vec();
        webp.extend([0x7F, 0x02, 0x00, 0xDF, 0x01, 0x00]); // 640 × 480, stored minus one
        assert_eq!(image_size(&inline(&webp)), Some((640, 480)));
        // JPEG: SOI, an APP0 segment, then SOF0 with height 600 and width 800.
        let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x00, 0x00];
        jpeg.extend([0xFF, 0xC0, 0x00, 0x11, 0x08, 0x02, 0x58, 0x03, 0x20, 0x03]);
        assert_eq!(image_size(&inline(&jpeg)), Some((800, 600)));
    }

    #[test]
    fn unknown_or_broken_images_have_no_size() {
        assert_eq!(
            image_size(&DataSource::Url {
                url: "https://x/y.png".into()
            }),
            None
        );
        let archived = DataSource::Archived {
            sha256: "00".into(),
            media_type: "image/png".into(),
        };
        assert_eq!(image_size(&archived), None);
        assert_eq!(image_size(&inline(b"\x89PNG\r\n\x1a\n")), None, "truncated");
        assert_eq!(image_size(&inline(&[0xFF, 0xD8, 0xFF, 0x00])), None);
        assert_eq!(
            image_size(&inline(&[0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xFF])),
            None
        );
        let url = DataSource::Url {
            url: "data:image/png,rawbytes".into(),
        };
        assert_eq!(image_size(&url), None);
    }
}
