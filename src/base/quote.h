// Text from outside (a request's field, a configuration key) shown inside an error line, and
// words quoted for a shell script.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpupool {

// `text` kept to one line and harmless to a terminal: control characters become \n, \t, \r or
// \xNN, bytes that are not UTF-8 \xNN, C1 controls and bidirectional overrides \uNNNN; text
// longer than `max_bytes` is cut (at a character boundary) and ends in "...".
std::string printable(std::string_view text, size_t max_bytes);

// printable(text, 64) in single quotes: 'polcy'.
std::string quote(std::string_view text);

// An environment variable's value as `resolve` and `map` show it: a JSON string ("0,1"), or
// unset.
std::string quoted_variable(const std::optional<std::string>& value);

// One word for a POSIX shell: as it is when it holds only characters no shell treats specially,
// else in single quotes (a ' inside becomes '\''). Newlines and every other byte stay as they are.
std::string shell_quote(std::string_view word);

}  // namespace gpupool
