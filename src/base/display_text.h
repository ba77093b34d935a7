// Other users' text (job names, commands, directories, reasons) in a terminal's columns:
// escaped as printable() does, measured in display cells (CJK and most emoji take two,
// combining marks none) and cut only between characters, never inside a UTF-8 sequence.
// Widths come from the C library's wcwidth(), which needs a UTF-8 LC_CTYPE (the commands set
// one at start); without it every character counts one cell.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace gpupool {

// The most of one value a line shows (a command may be up to a message long).
inline constexpr size_t kMaxShownBytes = 64 * 1024;

// The code point that starts at `at` (moved past it); nullopt for a byte that does not start a
// valid UTF-8 sequence (moved past that byte alone). Overlong forms and surrogates are invalid.
std::optional<char32_t> next_code_point(std::string_view text, size_t& at);

// The cells `text` takes on a terminal; control characters count one (printable() escapes them).
size_t display_width(std::string_view text);

// printable(text) in at most `cells` cells: when it is wider, cut at a character and ended
// with `mark`.
std::string fit_cells(std::string_view text, size_t cells, std::string_view mark = "~");

// fit_cells(text, cells), then spaces up to exactly `cells` cells.
std::string pad_cells(std::string_view text, size_t cells);

}  // namespace gpupool
