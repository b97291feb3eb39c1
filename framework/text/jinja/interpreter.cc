#include "framework/text/jinja/interpreter.h"

#include <cmath>
#include <unordered_map>

#include "framework/core/error.h"
#include "framework/text/jinja/builtins.h"
#include "framework/text/utf8.h"

namespace mg::text::jinja {

namespace {

enum class Flow { kNormal, kBreak, kContinue };

// An error already carrying its line is passed on as it is; others get the line of the node or
// expression being evaluated.
class LineError : public Error {
 public:
  using Error::Error;
};

// Python's ints do not overflow; ours are int64, so a result that does not fit is an error (a
// template computing such numbers is broken) instead of undefined behaviour.
// `op` is "+", "-", or "*" / "**" (both multiply).
int64_t checked_int(std::string_view op, int64_t a, int64_t b) {
  int64_t r = 0;
  const bool overflow = op == "+"   ? __builtin_add_overflow(a, b, &r)
                        : op == "-" ? __builtin_sub_overflow(a, b, &r)
                                    : __builtin_mul_overflow(a, b, &r);
  MG_CHECK(!overflow, "integer overflow in '{}'", op);
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  MG_CHECK(!(a == INT64_MIN && b == -1), "integer overflow in '//'");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 overflows in C++; Python's answer is 0
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// a ** b for b >= 0, by squaring (a loop of b multiplications would run for 2^63 steps).
int64_t int_pow(int64_t a, int64_t b) {
  int64_t result = 1;
  int64_t base = a;
  for (;;) {
    if (b & 1) result = checked_int("**", result, base);
    b >>= 1;
    if (b == 0) return result;
    base = checked_int("**", base, base);
  }
}

// Charges the work of computing `v` (limits.h): its bytes (a string) or items (a list, a dict).
void charge_value(const Value& v) {
  if (v.is_string()) charge_bytes(v.as_string().size());
  if (v.is_list()) charge_items(v.as_list().size());
  if (v.is_dict()) charge_items(v.as_dict().size());
}

// Whether evaluating `e` only looks a value up (shared, not copied): no charge for its size, so a
// loop that reads a long `messages` list costs one unit a read.
bool looks_up(const Expr& e) {
  return e.kind == Expr::Kind::kLiteral || e.kind == Expr::Kind::kName ||
         e.kind == Expr::Kind::kGetAttr || e.kind == Expr::Kind::kGetItem;
}

// Python slicing of `n` elements: the selected indices.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop,
                                   const Value& step_value) {
  const auto as_opt_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    MG_CHECK(v.kind() == Value::Kind::kInt, "slice {} must be an integer, got {}", what,
             v.type_name());
    return v.as_int();
  };
  const int64_t step = as_opt_int(step_value, "step").value_or(1);
  MG_CHECK(step != 0, "slice step cannot be zero");
  const auto clamp = [&](std::optional<int64_t> i, int64_t def) {
    if (!i) return def;
    int64_t x = *i;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(as_opt_int(start, "start"), step > 0 ? 0 : n - 1);
  const int64_t e = clamp(as_opt_int(stop, "stop"), step > 0 ? n : -1);
  std::vector<int64_t> out;
  // In 128 bits: `i += step` can pass int64's range after the last index (`s[1::2**63-1]`).
  for (__int128 i = b; step > 0 ? i < e : i > e; i += step) out.push_back(static_cast<int64_t>(i));
  return out;
}

class Interpreter {
 public:
  explicit Interpreter(const ValueDict& globals) {
    frames_.emplace_back();
    for (const auto& [k, v] : globals.items()) frames_[0][k] = v;
    install_builtins();
  }

  // Attribute assignment is the one way to change a value after it is made, so every cycle
  // (`{% set ns.self = ns %}`) passes through a dict it changed: emptying those dicts frees
  // what the render made, cycles included, instead of leaking it on each request.
  ~Interpreter() {
    for (auto& [ptr, d] : assigned_into_) d.as_dict() = ValueDict();
  }
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string run(const Body& body) {
    std::string out;
    exec(body, out);
    return out;
  }

 private:
  using Frame = std::unordered_map<std::string, Value>;

  void install_builtins() {
    Frame& g = frames_[0];
    g["range"] = Value::callable([](const CallArgs& args) {
      MG_CHECK(args.positional.size() >= 1 && args.positional.size() <= 3,
               "range() takes 1 to 3 arguments");
      std::vector<int64_t> v;
      for (const Value& a : args.positional) {
        MG_CHECK(a.kind() == Value::Kind::kInt, "range() takes integers, got {}", a.type_name());
        v.push_back(a.as_int());
      }
      const int64_t start = v.size() == 1 ? 0 : v[0];
      const int64_t stop = v.size() == 1 ? v[0] : v[1];
      const int64_t step = v.size() == 3 ? v[2] : 1;
      MG_CHECK(step != 0, "range() step must not be zero");
      // The count first (in 128 bits: stop - start can overflow int64), then the items.
      const __int128 span = static_cast<__int128>(stop) - start;
      const __int128 count = step > 0 ? (span > 0 ? (span + step - 1) / step : 0)
                                      : (span < 0 ? (span + step + 1) / step : 0);
      check_list_size(
          count > static_cast<__int128>(SIZE_MAX) ? SIZE_MAX : static_cast<size_t>(count),
          "range()");
      ValueList out;
      out.reserve(static_cast<size_t>(count));
      for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) {
        out.push_back(
            Value::integer(static_cast<int64_t>(start + static_cast<__int128>(k) * step)));
      }
      return Value::list(std::move(out));
    });
    const auto make_dict = [](const CallArgs& args) {
      ValueDict d;
      for (const Value& a : args.positional) {
        MG_CHECK(a.is_dict(), "namespace()/dict() takes keyword arguments or a mapping");
        for (const auto& [k, v] : a.as_dict().items()) d.set(k, v);
      }
      for (const auto& [k, v] : args.keyword) d.set(k, v);
      return Value::dict(std::move(d));
    };
    g["namespace"] = Value::callable(make_dict);
    g["dict"] = Value::callable(make_dict);
  }

  Value lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value();
  }

  [[noreturn]] void fail_at(int line, const std::string& what) {
    throw LineError(fmt::format("line {}: {}", line, what));
  }

  // Runs `fn`, turning a plain mg::Error into one that names `line`.
  template <typename Fn>
  auto at_line(int line, Fn&& fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const LineError&) {
      throw;
    } catch (const Error& e) {
      fail_at(line, e.what());
    }
  }

  void append(std::string& out, std::string_view s, int line) {
    charge_bytes(s.size());
    if (out.size() + s.size() > kMaxRenderBytes) {
      fail_at(line, fmt::format("the rendered prompt exceeds {} bytes", kMaxRenderBytes));
    }
    out += s;
  }

  Flow exec(const Body& body, std::string& out) {
    for (const NodePtr& n : body) {
      const Flow f = exec_node(*n, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  void assign(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = v;
      return;
    }
    MG_CHECK(v.is_list() && v.as_list().size() == targets.size(),
             "line {}: cannot unpack {} into {} names", line, v.type_name(), targets.size());
    for (size_t i = 0; i < targets.size(); ++i) frames_.back()[targets[i]] = v.as_list()[i];
  }

  Flow exec_node(const Node& n, std::string& out) {
    charge_work(1);
    // Blocks run by recursion too, and count toward the same depth as expressions.
    const DepthGuard depth(eval_depth_, kMaxEvalDepth,
                           "expressions and blocks (macro calls included)");
    switch (n.kind) {
      case Node::Kind::kText:
        append(out, n.text, n.line);
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        const Value v = eval(*n.expr);
        append(out, at_line(n.line, [&] { return to_str(v); }), n.line);
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (cond == nullptr || eval(*cond).truthy()) return exec(body, out);
        }
        return Flow::kNormal;
      case Node::Kind::kFor:
        exec_for(n, out);
        return Flow::kNormal;
      case Node::Kind::kSet: {
        const Value v = eval(*n.expr);
        if (!n.attr.empty()) {
          Value target = lookup(n.targets[0]);
          if (!target.is_dict()) {
            fail_at(n.line,
                    fmt::format("cannot assign attribute '{}' of '{}' ({}): not a namespace",
                                n.attr, n.targets[0], target.type_name()));
          }
          target.as_dict().set(n.attr, v);
          assigned_into_.emplace(&target.as_dict(), target);
        } else {
          assign(n.targets, v, n.line);
        }
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string captured;
        exec(n.body, captured);
        assign(n.targets, Value::string(std::move(captured)), n.line);
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        frames_.back()[n.name] = make_macro(n);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kBlock:
        return exec(n.body, out);
    }
    return Flow::kNormal;
  }

  void exec_for(const Node& n, std::string& out) {
    const Value iterable = eval(*n.expr);
    ValueList items = at_line(n.line, [&] { return iterate(iterable); });
    if (n.condition != nullptr) {
      ValueList kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        assign(n.targets, item, n.line);
        const bool keep = eval(*n.condition).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(n.else_body, out);
      return;
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      charge_items(10);  // the loop variable's ten entries, made each iteration
      ValueDict loop;
      loop.set("index", Value::integer(i + 1));
      loop.set("index0", Value::integer(i));
      loop.set("revindex", Value::integer(length - i));
      loop.set("revindex0", Value::integer(length - i - 1));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == length - 1));
      loop.set("length", Value::integer(length));
      loop.set("previtem", i > 0 ? items[i - 1] : Value());
      loop.set("nextitem", i + 1 < length ? items[i + 1] : Value());
      loop.set("cycle", Value::callable([i](const CallArgs& args) {
                 MG_CHECK(!args.positional.empty(), "loop.cycle() needs arguments");
                 return args.positional[static_cast<size_t>(i) % args.positional.size()];
               }));
      frames_.emplace_back();
      frames_.back()["loop"] = Value::dict(std::move(loop));
      assign(n.targets, items[i], n.line);
      const Flow f = exec(n.body, out);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
  }

  Value make_macro(const Node& n) {
    return Value::callable([this, &n](const CallArgs& args) {
      MG_CHECK(call_depth_ < kMaxCallDepth, "macro calls nested more than {} deep", kMaxCallDepth);
      MG_CHECK(args.positional.size() <= n.params.size(), "macro '{}' takes {} arguments, got {}",
               n.name, n.params.size(), args.positional.size());
      // The macro runs in a scope over the template's top-level names only.
      std::vector<Frame> saved;
      saved.assign(std::make_move_iterator(frames_.begin() + 1),
                   std::make_move_iterator(frames_.end()));
      frames_.resize(1);
      frames_.emplace_back();
      ++call_depth_;
      std::string out;
      try {
        for (size_t i = 0; i < n.params.size(); ++i) {
          const auto& [param, def] = n.params[i];
          Value v;
          bool given = false;
          if (i < args.positional.size()) {
            v = args.positional[i];
            given = true;
          }
          for (const auto& [k, kv] : args.keyword) {
            if (k == param) {
              v = kv;
              given = true;
            }
          }
          if (!given && def != nullptr) v = eval(*def);
          frames_.back()[param] = v;
        }
        for (const auto& [k, kv] : args.keyword) {
          bool known = false;
          for (const auto& p : n.params) known |= p.first == k;
          MG_CHECK(known, "macro '{}' has no parameter '{}'", n.name, k);
        }
        exec(n.body, out);
      } catch (...) {
        --call_depth_;
        frames_.resize(1);
        for (Frame& f : saved) frames_.push_back(std::move(f));
        throw;
      }
      --call_depth_;
      frames_.resize(1);
      for (Frame& f : saved) frames_.push_back(std::move(f));
      return Value::string(std::move(out));
    });
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs args;
    for (const ExprPtr& a : e.items) args.positional.push_back(eval(*a));
    for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
    return args;
  }

  Value eval(const Expr& e) {
    return at_line(e.line, [&] {
      const DepthGuard depth(eval_depth_, kMaxEvalDepth,
                             "expressions and blocks (macro calls included)");
      charge_work(1);
      Value v = eval_unchecked(e);
      if (!looks_up(e)) charge_value(v);
      return v;
    });
  }

  Value eval_unchecked(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList: {
        ValueList items;
        for (const ExprPtr& i : e.items) items.push_back(eval(*i));
        return Value::list(std::move(items));
      }
      case Expr::Kind::kDict: {
        ValueDict d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value k = eval(*e.items[i]);
          MG_CHECK(k.is_string(), "dict literal keys must be strings, got {}", k.type_name());
          d.set(k.as_string(), eval(*e.items[i + 1]));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::kGetAttr: {
        const Value obj = eval(*e.a);
        MG_CHECK(!obj.is_undefined(), "'{}' is undefined (reading .{})", describe(*e.a), e.name);
        return get_item(obj, Value::string(e.name));
      }
      case Expr::Kind::kGetItem: {
        const Value obj = eval(*e.a);
        MG_CHECK(!obj.is_undefined(), "'{}' is undefined (reading an item)", describe(*e.a));
        return get_item(obj, eval(*e.b));
      }
      case Expr::Kind::kSlice: {
        const Value obj = eval(*e.a);
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.items[i] != nullptr) parts[i] = eval(*e.items[i]);
        }
        if (obj.is_string()) {
          // Slices by character, through the characters' byte offsets (no list of them).
          const std::string& s = obj.as_string();
          const std::vector<size_t> starts = utf8_char_starts(s);
          std::string out;
          for (int64_t i :
               slice_indices(static_cast<int64_t>(starts.size()), parts[0], parts[1], parts[2])) {
            const size_t at = starts[static_cast<size_t>(i)];
            out.append(s, at, utf8_char_length(s, at));
          }
          return Value::string(out);
        }
        MG_CHECK(obj.is_list(), "cannot slice {}", obj.type_name());
        ValueList out;
        for (int64_t i : slice_indices(static_cast<int64_t>(obj.as_list().size()), parts[0],
                                       parts[1], parts[2])) {
          out.push_back(obj.as_list()[static_cast<size_t>(i)]);
        }
        return Value::list(std::move(out));
      }
      case Expr::Kind::kCall: {
        if (e.a->kind == Expr::Kind::kGetAttr) {
          const Value obj = eval(*e.a->a);
          MG_CHECK(!obj.is_undefined(), "'{}' is undefined (calling .{}())", describe(*e.a->a),
                   e.a->name);
          CallArgs args = eval_args(e);
          if (std::optional<Value> r = call_method(obj, e.a->name, args)) return *r;
          const Value fn = get_item(obj, Value::string(e.a->name));
          MG_CHECK(fn.is_callable(), "{} has no method '{}'", obj.type_name(), e.a->name);
          return fn.as_callable()(args);
        }
        const Value fn = eval(*e.a);
        MG_CHECK(fn.is_callable(), "'{}' is not callable ({})", describe(*e.a), fn.type_name());
        return fn.as_callable()(eval_args(e));
      }
      case Expr::Kind::kFilter:
        return apply_filter(e.name, eval(*e.a), eval_args(e));
      case Expr::Kind::kTest: {
        const bool r = apply_test(e.name, eval(*e.a), eval_args(e));
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*e.a);
        if (e.name == "not") return Value::boolean(!v.truthy());
        MG_CHECK(v.is_number(), "bad operand type for unary {}: {}", e.name, v.type_name());
        if (e.name == "+") return v;
        if (v.kind() == Value::Kind::kInt) {
          MG_CHECK(v.as_int() != INT64_MIN, "integer overflow in unary '-'");
          return Value::integer(-v.as_int());
        }
        return Value::real(-v.as_number());
      }
      case Expr::Kind::kBinary:
        return eval_binary(e);
      case Expr::Kind::kConditional:
        if (eval(*e.b).truthy()) return eval(*e.a);
        return e.c != nullptr ? eval(*e.c) : Value();
    }
    return Value();
  }

  static std::string describe(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kName:
        return e.name;
      case Expr::Kind::kGetAttr:
        return describe(*e.a) + "." + e.name;
      case Expr::Kind::kGetItem:
        return describe(*e.a) + "[...]";
      case Expr::Kind::kLiteral:
      case Expr::Kind::kList:
      case Expr::Kind::kDict:
      case Expr::Kind::kSlice:
      case Expr::Kind::kCall:
      case Expr::Kind::kFilter:
      case Expr::Kind::kTest:
      case Expr::Kind::kUnary:
      case Expr::Kind::kBinary:
      case Expr::Kind::kConditional:
        break;
    }
    return "expression";
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.a);
      return a.truthy() ? eval(*e.b) : a;
    }
    if (op == "or") {
      Value a = eval(*e.a);
      return a.truthy() ? a : eval(*e.b);
    }
    const Value a = eval(*e.a);
    const Value b = eval(*e.b);
    using K = Value::Kind;
    if (op == "==") return Value::boolean(values_equal(a, b));
    if (op == "!=") return Value::boolean(!values_equal(a, b));
    if (op == "<") return Value::boolean(value_less(a, b));
    if (op == ">") return Value::boolean(value_less(b, a));
    if (op == "<=") return Value::boolean(!value_less(b, a));
    if (op == ">=") return Value::boolean(!value_less(a, b));
    if (op == "in") return Value::boolean(value_contains(b, a));
    if (op == "not in") return Value::boolean(!value_contains(b, a));
    if (op == "~") {
      std::string x = to_str(a);
      const std::string y = to_str(b);
      check_string_size(x.size() + y.size(), "'~'");
      return Value::string(std::move(x) + y);
    }
    const bool ints = (a.kind() == K::kInt || a.kind() == K::kBool) &&
                      (b.kind() == K::kInt || b.kind() == K::kBool);
    const auto as_int = [](const Value& v) {
      return v.kind() == K::kBool ? static_cast<int64_t>(v.as_bool()) : v.as_int();
    };
    const bool numbers =
        (a.is_number() || a.kind() == K::kBool) && (b.is_number() || b.kind() == K::kBool);
    const auto as_num = [](const Value& v) {
      return v.kind() == K::kBool ? static_cast<double>(v.as_bool()) : v.as_number();
    };
    if (op == "+") {
      if (ints) return Value::integer(checked_int("+", as_int(a), as_int(b)));
      if (numbers) return Value::real(as_num(a) + as_num(b));
      if (a.is_string() && b.is_string()) {
        check_string_size(a.as_string().size() + b.as_string().size(), "'+'");
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list()) {
        check_list_size(a.as_list().size() + b.as_list().size(), "'+'");
        ValueList out = a.as_list();
        out.insert(out.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(out));
      }
    } else if (op == "-") {
      if (ints) return Value::integer(checked_int("-", as_int(a), as_int(b)));
      if (numbers) return Value::real(as_num(a) - as_num(b));
    } else if (op == "*") {
      if (ints) return Value::integer(checked_int("*", as_int(a), as_int(b)));
      if (numbers) return Value::real(as_num(a) * as_num(b));
      const Value& seq = a.is_number() ? b : a;
      const Value& count = a.is_number() ? a : b;
      if (count.kind() == K::kInt && (seq.is_string() || seq.is_list())) {
        // The result's size before it is built (a count times a long string is a huge
        // allocation); a negative count repeats nothing, as in Python.
        const uint64_t times = count.as_int() < 0 ? 0 : static_cast<uint64_t>(count.as_int());
        const uint64_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
        const uint64_t total =
            unit == 0 ? 0 : (times > UINT64_MAX / unit ? UINT64_MAX : times * unit);
        if (total == 0) return seq.is_string() ? Value::string("") : Value::list();  // '' * 10^18
        if (seq.is_string()) {
          check_string_size(total, "'*'");
          std::string out;
          for (int64_t i = 0; i < count.as_int(); ++i) out += seq.as_string();
          return Value::string(out);
        }
        check_list_size(total, "'*'");
        ValueList out;
        for (int64_t i = 0; i < count.as_int(); ++i) {
          out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
        }
        return Value::list(std::move(out));
      }
    } else if (op == "/") {
      if (numbers) {
        MG_CHECK(as_num(b) != 0, "division by zero");
        return Value::real(as_num(a) / as_num(b));
      }
    } else if (op == "//") {
      if (ints) {
        MG_CHECK(as_int(b) != 0, "integer division by zero");
        return Value::integer(floor_div(as_int(a), as_int(b)));
      }
      if (numbers) {
        MG_CHECK(as_num(b) != 0, "division by zero");
        return Value::real(std::floor(as_num(a) / as_num(b)));
      }
    } else if (op == "%") {
      if (ints) {
        MG_CHECK(as_int(b) != 0, "modulo by zero");
        return Value::integer(floor_mod(as_int(a), as_int(b)));
      }
      if (numbers) {
        MG_CHECK(as_num(b) != 0, "modulo by zero");
        const double r = std::fmod(as_num(a), as_num(b));
        return Value::real(r != 0 && ((r < 0) != (as_num(b) < 0)) ? r + as_num(b) : r);
      }
      MG_CHECK(!a.is_string(), "string formatting with '%' is not supported");
    } else if (op == "**") {
      if (ints && as_int(b) >= 0) return Value::integer(int_pow(as_int(a), as_int(b)));
      if (numbers) return Value::real(std::pow(as_num(a), as_num(b)));
    }
    MG_FAIL("unsupported operand types for {}: {} and {}", op, a.type_name(), b.type_name());
  }

  std::vector<Frame> frames_;
  std::unordered_map<const ValueDict*, Value> assigned_into_;  // dicts an assignment changed
  int call_depth_ = 0;                                         // macro calls in progress
  int eval_depth_ = 0;  // expressions being evaluated and blocks being run, macros' included
};

}  // namespace

std::string render(const Body& body, const ValueDict& globals, int64_t work_limit) {
  WorkBudget budget(work_limit);
  Interpreter interpreter(globals);
  return interpreter.run(body);
}

}  // namespace mg::text::jinja
