// ParsePartitionSpec: a hand-written, non-recursive parser for JAX's syntax.
//
// Grammar (whitespace between tokens is ignored):
//   spec      := head '(' items ')' | '(' items ')' | '[' items ']'
//   head      := 'P' | 'PartitionSpec' | <dotted name ending in .P/.PartitionSpec>
//   items     := [ item { ',' item } [ ',' ] ]
//   item      := 'None' | 'null' | string | tuple | 'unreduced' '=' set
//   tuple     := ('(' | '[') [ string { ',' string } [ ','] ] (')' | ']')
//   set       := ('{' | '[' | '(') [ string { ',' string } [ ','] ] matching close
//              | 'set' '(' ')' | 'frozenset' '(' ')'
//   string    := '\'' chars '\'' | '"' chars '"'      (no escapes)
// Keyword items must follow every positional item. Tuples may not nest. The
// nesting depth is bounded by the grammar (at most two brackets), so the parser
// is a flat loop: no recursion on any input.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "common/sharding/text_util.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_util.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

using sharding_internal::PrintableText;
namespace {

constexpr size_t kMaxQuotedText = 200;

enum class TokenKind { kEnd, kIdent, kString, kPunct, kBad };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  absl::string_view text;  // ident/string contents, or the punctuation char
  size_t pos = 0;          // byte offset in the input
};

class Lexer {
 public:
  explicit Lexer(absl::string_view text) : text_(text) {}

  Token Next() {
    while (pos_ < text_.size() && absl::ascii_isspace(text_[pos_])) ++pos_;
    Token tok;
    tok.pos = pos_;
    if (pos_ >= text_.size()) return tok;
    const char c = text_[pos_];
    if (absl::ascii_isalpha(c) || c == '_') {
      size_t end = pos_;
      while (end < text_.size() &&
             (absl::ascii_isalnum(text_[end]) || text_[end] == '_' ||
              text_[end] == '.')) {
        ++end;
      }
      tok.kind = TokenKind::kIdent;
      tok.text = text_.substr(pos_, end - pos_);
      pos_ = end;
      return tok;
    }
    if (c == '\'' || c == '"') {
      size_t end = pos_ + 1;
      // Names never contain a quote of either kind, so that ToString's
      // single-quoted form always parses back (found by the fuzzer).
      while (end < text_.size() && text_[end] != '\'' && text_[end] != '"' &&
             text_[end] != '\\' && text_[end] != '\n') {
        ++end;
      }
      if (end >= text_.size() || text_[end] != c) {
        tok.kind = TokenKind::kBad;
        tok.text = end >= text_.size() || text_[end] == '\n'
                       ? "unterminated string"
                   : text_[end] == '\\'
                       ? "escape sequences are not supported in axis names"
                       : "quote characters are not allowed in axis names";
        pos_ = text_.size();
        return tok;
      }
      tok.kind = TokenKind::kString;
      tok.text = text_.substr(pos_ + 1, end - pos_ - 1);
      pos_ = end + 1;
      return tok;
    }
    tok.kind = TokenKind::kPunct;
    tok.text = text_.substr(pos_, 1);
    ++pos_;
    return tok;
  }

 private:
  absl::string_view text_;
  size_t pos_ = 0;
};

bool IsPunct(const Token& t, char c) {
  return t.kind == TokenKind::kPunct && t.text[0] == c;
}
bool IsOpen(const Token& t) {
  return IsPunct(t, '(') || IsPunct(t, '[') || IsPunct(t, '{');
}
char CloseFor(char open) {
  return open == '(' ? ')' : open == '[' ? ']' : '}';
}
bool IsNoneWord(const Token& t) {
  return t.kind == TokenKind::kIdent &&
         (t.text == "None" || t.text == "null" || t.text == "none");
}
std::string Describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kEnd:
      return "end of text";
    case TokenKind::kString:
      return absl::StrCat("string '", PrintableText(t.text), "'");
    default:
      return absl::StrCat("'", PrintableText(t.text), "'");
  }
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text), lexer_(text) {}

  absl::StatusOr<PartitionSpec> Parse() {
    Token tok = lexer_.Next();
    if (tok.kind == TokenKind::kIdent) {
      if (!(tok.text == "P" || tok.text == "PartitionSpec" ||
            absl::EndsWith(tok.text, ".P") ||
            absl::EndsWith(tok.text, ".PartitionSpec"))) {
        return Error(tok, absl::StrCat("expected P(...), PartitionSpec(...) or a "
                                       "list, got ", Describe(tok)));
      }
      tok = lexer_.Next();
      if (!IsPunct(tok, '(')) {
        return Error(tok, absl::StrCat("expected '(', got ", Describe(tok)));
      }
    } else if (!(IsPunct(tok, '(') || IsPunct(tok, '['))) {
      return Error(tok, absl::StrCat("expected P(...), PartitionSpec(...) or a "
                                     "list, got ", Describe(tok)));
    }
    const char close = CloseFor(tok.text[0]);
    absl::Status status = ParseItems(tok, close);
    if (!status.ok()) return status;
    Token rest = lexer_.Next();
    if (rest.kind != TokenKind::kEnd) {
      return Error(rest, absl::StrCat("unexpected ", Describe(rest),
                                      " after the closing '", std::string(1, close),
                                      "'"));
    }
    return PartitionSpec(std::move(entries_), std::move(unreduced_));
  }

 private:
  absl::Status Error(const Token& at, absl::string_view problem) const {
    return InvalidArgument("invalid PartitionSpec \"",
                           PrintableText(text_, kMaxQuotedText), "\": ",
                           at.kind == TokenKind::kBad ? at.text : problem,
                           " at position ", at.pos);
  }

  // After an item of the list `open` started: `close` ends it (*closed),
  // ',' continues; anything else is the error, naming `what` when given.
  absl::Status ExpectCommaOrClose(const Token& open, char close, absl::string_view what,
                                  bool* closed) {
    Token sep = lexer_.Next();
    *closed = IsPunct(sep, close);
    if (*closed || IsPunct(sep, ',')) return absl::OkStatus();
    if (sep.kind == TokenKind::kEnd) {
      return Error(sep, absl::StrCat("unbalanced brackets: '", open.text, "' opened at position ",
                                     open.pos, " is never closed"));
    }
    return Error(sep, absl::StrCat("expected ',' or '", std::string(1, close), "'",
                                   what.empty() ? "" : absl::StrCat(" in ", what), ", got ",
                                   Describe(sep)));
  }

  // Items up to and including `close`.
  absl::Status ParseItems(const Token& open, char close) {
    bool seen_keyword = false;
    for (;;) {
      Token tok = lexer_.Next();
      if (IsPunct(tok, close)) return absl::OkStatus();
      if (tok.kind == TokenKind::kIdent && tok.text == "unreduced") {
        absl::Status s = ParseUnreduced();
        if (!s.ok()) return s;
        seen_keyword = true;
      } else if (tok.kind == TokenKind::kIdent && !IsNoneWord(tok) &&
                 PeekIsEquals()) {
        return Error(tok, absl::StrCat("unsupported keyword argument ",
                                       Describe(tok), " (only unreduced=)"));
      } else {
        if (seen_keyword) {
          return Error(tok, "positional entry after a keyword argument");
        }
        absl::Status s = ParseEntry(tok);
        if (!s.ok()) return s;
      }
      bool closed = false;
      absl::Status s = ExpectCommaOrClose(open, close, "", &closed);
      if (!s.ok() || closed) return s;
    }
  }

  // Looks ahead for '=' without consuming the following tokens.
  bool PeekIsEquals() {
    Lexer copy = lexer_;
    return IsPunct(copy.Next(), '=');
  }

  absl::Status ParseEntry(const Token& tok) {
    if (IsNoneWord(tok)) {
      entries_.emplace_back();
      return absl::OkStatus();
    }
    if (tok.kind == TokenKind::kString) {
      if (tok.text.empty()) return Error(tok, "empty axis name");
      entries_.push_back({std::string(tok.text)});
      return absl::OkStatus();
    }
    if (IsPunct(tok, '(') || IsPunct(tok, '[')) {
      std::vector<std::string> names;
      absl::Status s = ParseNames(tok, CloseFor(tok.text[0]), "a tuple", &names);
      if (!s.ok()) return s;
      entries_.push_back(std::move(names));  // () -> None, ('x',) -> 'x'
      return absl::OkStatus();
    }
    if (tok.kind == TokenKind::kEnd) {
      return Error(tok, "unexpected end of text (unbalanced brackets)");
    }
    return Error(tok, absl::StrCat("expected an axis name, None or a tuple of "
                                   "axis names, got ", Describe(tok)));
  }

  absl::Status ParseUnreduced() {
    Token eq = lexer_.Next();
    if (!IsPunct(eq, '=')) {
      return Error(eq, absl::StrCat("expected '=' after unreduced, got ",
                                    Describe(eq)));
    }
    Token open = lexer_.Next();
    if (open.kind == TokenKind::kIdent &&
        (open.text == "set" || open.text == "frozenset")) {
      Token paren = lexer_.Next();
      Token close = lexer_.Next();
      if (!IsPunct(paren, '(') || !IsPunct(close, ')')) {
        return Error(paren, "expected set() or frozenset()");
      }
      return absl::OkStatus();
    }
    if (!IsOpen(open)) {
      return Error(open, absl::StrCat("expected a set of axis names after "
                                      "unreduced=, got ", Describe(open)));
    }
    std::vector<std::string> names;
    absl::Status s = ParseNames(open, CloseFor(open.text[0]), "unreduced", &names);
    if (!s.ok()) return s;
    for (std::string& n : names) {
      bool dup = false;
      for (const std::string& u : unreduced_) dup = dup || u == n;
      if (!dup) unreduced_.push_back(std::move(n));
    }
    return absl::OkStatus();
  }

  // Quoted names up to and including `close`; no nesting.
  absl::Status ParseNames(const Token& open, char close, absl::string_view what,
                          std::vector<std::string>* names) {
    for (;;) {
      Token tok = lexer_.Next();
      if (IsPunct(tok, close)) return absl::OkStatus();
      if (IsOpen(tok)) {
        return Error(tok, absl::StrCat("nested tuples are not allowed in ", what));
      }
      if (tok.kind == TokenKind::kEnd) {
        return Error(tok, absl::StrCat("unbalanced brackets: '", open.text,
                                       "' opened at position ", open.pos,
                                       " is never closed"));
      }
      if (tok.kind != TokenKind::kString) {
        return Error(tok, absl::StrCat("expected a quoted axis name in ", what,
                                       ", got ", Describe(tok)));
      }
      if (tok.text.empty()) return Error(tok, "empty axis name");
      names->emplace_back(tok.text);
      bool closed = false;
      absl::Status s = ExpectCommaOrClose(open, close, what, &closed);
      if (!s.ok() || closed) return s;
    }
  }

  absl::string_view text_;
  Lexer lexer_;
  std::vector<PartitionSpec::Entry> entries_;
  std::vector<std::string> unreduced_;
};

}  // namespace

absl::StatusOr<PartitionSpec> ParsePartitionSpec(absl::string_view text) {
  return Parser(text).Parse();
}

}  // namespace meshserve
