#include "framework/io/npy.h"

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "framework/core/checked_math.h"
#include "framework/core/error.h"
#include "framework/io/mmap_file.h"
#include "framework/io/regular_file.h"

namespace mg {

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kAlignment = 64;  // header + preamble length is a multiple of this

struct NpyType {
  DType dtype;
  std::string_view descr;
};

// One-byte types carry '|' (no byte order), as numpy writes them.
constexpr std::array<NpyType, 9> kNpyTypes = {{
    {DType::kF32, "<f4"},
    {DType::kF64, "<f8"},
    {DType::kF16, "<f2"},
    {DType::kI64, "<i8"},
    {DType::kI32, "<i4"},
    {DType::kI16, "<i2"},
    {DType::kI8, "|i1"},
    {DType::kU8, "|u1"},
    {DType::kBool, "|b1"},
}};

std::string supported_descrs() {
  std::string out;
  for (const NpyType& t : kNpyTypes) {
    if (!out.empty()) out += ", ";
    out += t.descr;
  }
  return out;
}

std::optional<std::string_view> descr_of(DType dtype) {
  for (const NpyType& t : kNpyTypes) {
    if (t.dtype == dtype) return t.descr;
  }
  return std::nullopt;
}

std::string shape_tuple(const Shape& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

// The header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// A parser for the one Python literal numpy writes as the header; anything else is an error.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  NpyHeader parse() {
    NpyHeader header;
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        header.descr = string_literal();
        has_descr = true;
      } else if (key == "fortran_order") {
        header.fortran_order = boolean();
        has_order = true;
      } else if (key == "shape") {
        header.shape = tuple();
        has_shape = true;
      } else {
        fail(fmt::format("unexpected key '{}' (expected descr, fortran_order and shape)", key));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
    }
    ++pos_;  // '}'
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the dict");
    if (!has_descr || !has_order || !has_shape) {
      fail("the dict must hold descr, fortran_order and shape");
    }
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    MG_FAIL("{}: malformed npy header at byte {} of the header: {}", file_, pos_, what);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string string_literal() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    for (char c : s) {
      // Every string a supported header holds is printable ASCII; keeps error messages clean.
      if (c < 0x20 || c > 0x7e) fail("unexpected byte in a string (expected printable ASCII)");
    }
    pos_ = end + 1;
    return s;
  }
  bool boolean() {
    skip_space();
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    fail("expected True or False");
  }
  int64_t integer() {
    skip_space();
    if (peek() < '0' || peek() > '9') fail("expected a non-negative integer");
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, peek() - '0', &v)) {
        fail("integer out of range");
      }
      ++pos_;
    }
    if (peek() == 'L') ++pos_;  // Python 2 long suffix, still found in old files
    return v;
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    while (true) {
      skip_space();
      if (peek() == ')') break;
      shape.push_back(integer());
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail("expected ',' or ')' in the shape");
    }
    ++pos_;  // ')'
    return shape;
  }

  std::string_view text_;
  std::string_view file_;
  size_t pos_ = 0;
};

}  // namespace

void write_npy(const std::filesystem::path& path, const Tensor& tensor) {
  const std::string file = path.string();
  MG_CHECK(tensor.defined(), "{}: cannot write an undefined tensor", file);
  MG_CHECK(tensor.device().is_cpu(), "{}: tensor is on {} (expected a CPU tensor)", file,
           tensor.device().str());
  const std::optional<std::string_view> descr = descr_of(tensor.dtype());
  MG_CHECK(descr.has_value(),
           "{}: numpy has no {} type (writable: F32, F64, F16, I64, I32, I16, I8, "
           "U8, BOOL); convert to F32 first",
           file, dtype_name(tensor.dtype()));

  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", *descr,
                                 shape_tuple(tensor.shape()));
  // Magic, version, header length (2 bytes in version 1.0, 4 in 2.0), then the dict padded with
  // spaces and ended by '\n' so that the data starts at a multiple of 64 bytes.
  const auto padded_total = [&](size_t preamble) {
    return (preamble + dict.size() + 1 + kAlignment - 1) / kAlignment * kAlignment;
  };
  const size_t v1_preamble = kMagic.size() + 2 + 2;
  const bool v1 = padded_total(v1_preamble) - v1_preamble <= 0xffff;
  const size_t preamble = v1 ? v1_preamble : kMagic.size() + 2 + 4;
  const size_t total = padded_total(preamble);
  dict.resize(total - preamble - 1, ' ');
  dict += '\n';

  std::string head(kMagic);
  head += static_cast<char>(v1 ? 1 : 2);
  head += '\0';
  const size_t len = dict.size();
  for (size_t i = 0; i < (v1 ? 2u : 4u); ++i) head += static_cast<char>((len >> (8 * i)) & 0xff);
  head += dict;

  const std::array<std::span<const uint8_t>, 2> pieces = {
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(head.data()), head.size()),
      std::span<const uint8_t>(static_cast<const uint8_t*>(tensor.raw()), tensor.nbytes())};
  write_file_atomically(path, pieces);
}

Tensor parse_npy(std::span<const uint8_t> bytes, std::string_view name) {
  const std::string_view data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  MG_CHECK(data.substr(0, kMagic.size()) == kMagic,
           "{}: not an npy file (expected the magic string \\x93NUMPY at the start)", name);
  MG_CHECK(data.size() >= kMagic.size() + 2, "{}: npy file truncated inside its preamble", name);
  const int major = static_cast<uint8_t>(data[kMagic.size()]);
  const int minor = static_cast<uint8_t>(data[kMagic.size() + 1]);
  MG_CHECK(major >= 1 && major <= 3, "{}: npy format version {}.{} is not supported (1.0 to 3.0)",
           name, major, minor);
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t preamble = kMagic.size() + 2 + len_bytes;
  MG_CHECK(data.size() >= preamble, "{}: npy file truncated inside its preamble", name);
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) {
    header_len |= static_cast<size_t>(static_cast<uint8_t>(data[kMagic.size() + 2 + i])) << (8 * i);
  }
  MG_CHECK(header_len <= data.size() - preamble,
           "{}: npy header length {} runs past the end of the file ({} bytes)", name, header_len,
           data.size());

  const NpyHeader header = HeaderParser(data.substr(preamble, header_len), name).parse();
  MG_CHECK(
      !header.fortran_order,
      "{}: array is stored in Fortran order (expected fortran_order False: save a C-contiguous "
      "array, e.g. numpy.ascontiguousarray)",
      name);
  MG_CHECK(header.descr.empty() || header.descr[0] != '>',
           "{}: big-endian element type '{}' is not supported (expected little-endian)", name,
           header.descr);
  std::optional<DType> dtype;
  for (const NpyType& t : kNpyTypes) {
    if (t.descr == header.descr) dtype = t.dtype;
  }
  MG_CHECK(dtype.has_value(), "{}: unsupported element type '{}' (supported: {})", name,
           header.descr, supported_descrs());

  const std::optional<size_t> nbytes = checked_nbytes(header.shape, *dtype);
  MG_CHECK(nbytes.has_value(), "{}: shape {} is too large to address", name,
           shape_tuple(header.shape));
  const size_t needed = *nbytes;
  const size_t have = data.size() - preamble - header_len;
  MG_CHECK(have >= needed, "{}: npy file truncated: '{}' {} needs {} bytes of data, found {}", name,
           header.descr, shape_tuple(header.shape), needed, have);
  MG_CHECK(have == needed, "{}: {} unexpected bytes after the data of '{}' {}", name, have - needed,
           header.descr, shape_tuple(header.shape));

  Tensor out = Tensor::empty_cpu(*dtype, header.shape);
  if (needed > 0) std::memcpy(out.raw(), bytes.data() + preamble + header_len, needed);
  return out;
}

Tensor read_npy(const std::filesystem::path& path) {
  std::shared_ptr<MappedFile> file = MappedFile::open(path);
  return parse_npy(file->bytes(), path.string());
}

}  // namespace mg
