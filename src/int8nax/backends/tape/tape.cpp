// Replays of recorded MLX graphs: the host work of an int8nax layer's call in one C++ step.
//
// A Tapes object belongs to one layer (or sibling group, or MLP) whose weights stay the same
// arrays. Its first call for an input signature builds the graph in Python as usual (the
// backend's launches on x) and records it here: every array computed from x becomes a step
// (its primitive, output shapes and dtypes, and where its inputs come from); everything else
// the graph reads (weights, scales, plan arrays) is held as a constant. Later calls with the
// same x shape, x dtype and default stream create the same arrays on the new x, reusing the
// recorded primitives: what mx.compile's replay does, without its cache lookup, argument
// flattening and per-call Python frames. The key holds the stream because a primitive keeps
// the stream it was built for (mlx-lm generates on a stream of its own), and a context object
// the caller gives (compared by ==): what else the graph was built under (int8nax passes
// INT8NAX_BACKEND's value, which chooses the backend).
//
// A call whose x is a tracer (inside mx.grad, mx.vjp, mx.jvp, mx.vmap or mx.compile) is not
// replayed: the caller takes its general path, which gives transformations their custom
// functions. invalidate() drops every recording of every Tapes object (after a backend setting
// changed what a graph would be).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include "mlx/array.h"
#include "mlx/device.h"
#include "mlx/primitives.h"
#include "mlx/stream.h"

namespace nb = nanobind;
namespace mx = mlx::core;

namespace {

// Bumped by invalidate(): a recording made under an older value is never replayed.
uint64_t g_epoch = 1;

struct Step {
  std::shared_ptr<mx::Primitive> primitive;
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  std::vector<uint32_t> inputs;  // slots
};

// Slots: 0 is x, then the constants, then every step's outputs in order.
struct Tape {
  mx::Shape shape;
  mx::Dtype dtype = mx::float32;
  int stream = -1;
  nb::object context;
  uint64_t epoch = 0;
  std::vector<mx::array> constants;
  std::vector<Step> steps;
  std::vector<uint32_t> outputs;
  size_t slots = 0;
};

int current_stream() {
  return mx::default_stream(mx::default_device()).index;
}

Tape record_tape(const mx::array& x, const std::vector<mx::array>& outputs, nb::handle context) {
  // The arrays the outputs need, in an order where each comes after its inputs; x ends the walk.
  std::vector<mx::array> order;
  std::unordered_map<std::uintptr_t, bool> seen{{x.id(), true}};
  std::function<void(const mx::array&)> visit = [&](const mx::array& a) {
    if (seen.count(a.id())) {
      return;
    }
    for (auto& s : a.outputs()) {
      seen[s.id()] = true;
    }
    if (!a.has_primitive()) {
      return;  // a leaf: a constant
    }
    for (auto& in : a.inputs()) {
      visit(in);
    }
    order.push_back(a);
  };
  for (auto& o : outputs) {
    visit(o);
  }
  // Steps are the arrays computed from x; the rest (leaves, and arrays that do not depend on x)
  // are constants, held as they are.
  std::unordered_map<std::uintptr_t, bool> from_x{{x.id(), true}};
  std::vector<mx::array> computed;
  for (auto& a : order) {
    bool depends = false;
    for (auto& in : a.inputs()) {
      depends = depends || from_x.count(in.id());
    }
    if (depends) {
      for (auto& s : a.outputs()) {
        from_x[s.id()] = true;
      }
      computed.push_back(a);
    }
  }
  Tape t;
  t.shape = x.shape();
  t.dtype = x.dtype();
  t.stream = current_stream();
  t.context = nb::borrow(context);
  t.epoch = g_epoch;
  std::unordered_map<std::uintptr_t, uint32_t> slot{{x.id(), 0}};
  auto constant = [&](const mx::array& a) {
    if (!slot.count(a.id())) {
      t.constants.push_back(a);
      slot[a.id()] = static_cast<uint32_t>(t.constants.size());
    }
  };
  for (auto& a : computed) {
    for (auto& in : a.inputs()) {
      if (!from_x.count(in.id())) {
        constant(in);
      }
    }
  }
  for (auto& o : outputs) {
    if (!from_x.count(o.id())) {
      constant(o);
    }
  }
  uint32_t next = static_cast<uint32_t>(t.constants.size()) + 1;
  for (auto& a : computed) {
    Step step;
    step.primitive = a.primitive_ptr();
    for (auto& in : a.inputs()) {
      step.inputs.push_back(slot.at(in.id()));
    }
    for (auto& o : a.outputs()) {
      step.shapes.push_back(o.shape());
      step.dtypes.push_back(o.dtype());
      slot[o.id()] = next++;
    }
    t.steps.push_back(std::move(step));
  }
  for (auto& o : outputs) {
    t.outputs.push_back(slot.at(o.id()));
  }
  t.slots = next;
  return t;
}

std::vector<mx::array> replay(const Tape& t, const mx::array& x) {
  std::vector<mx::array> slots;
  slots.reserve(t.slots);
  slots.push_back(x);
  slots.insert(slots.end(), t.constants.begin(), t.constants.end());
  std::vector<mx::array> inputs;
  for (auto& step : t.steps) {
    inputs.clear();
    for (uint32_t s : step.inputs) {
      inputs.push_back(slots[s]);
    }
    if (step.shapes.size() == 1) {
      slots.emplace_back(step.shapes[0], step.dtypes[0], step.primitive, inputs);
    } else {
      for (auto& o : mx::array::make_arrays(step.shapes, step.dtypes, step.primitive, inputs)) {
        slots.push_back(std::move(o));
      }
    }
  }
  std::vector<mx::array> out;
  out.reserve(t.outputs.size());
  for (uint32_t s : t.outputs) {
    out.push_back(slots[s]);
  }
  return out;
}

class Tapes {
 public:
  Tapes(size_t outputs, size_t limit) : outputs_(outputs), limit_(limit) {
    if (outputs == 0 || limit == 0) {
      throw nb::value_error("Tapes: 'outputs' and 'limit' must be positive");
    }
  }

  // The outputs for x (one array, or a tuple of `outputs`), or None where nothing recorded
  // serves this call (another signature, stream or context, an older epoch, or x a tracer).
  nb::object call(const mx::array& x, nb::handle context) {
    const Tape* t = find(x, context);
    if (t == nullptr) {
      return nb::none();
    }
    auto out = replay(*t, x);
    if (outputs_ == 1) {
      return nb::cast(std::move(out[0]));
    }
    nb::tuple result = nb::steal<nb::tuple>(PyTuple_New(out.size()));
    for (size_t i = 0; i < out.size(); i++) {
      PyTuple_SET_ITEM(result.ptr(), i, nb::cast(std::move(out[i])).release().ptr());
    }
    return result;
  }

  // Record the graph from x to `outputs` (built on x just now, under `context`) for later calls of
  // its signature. False where it is not recorded: x is a tracer, or the count of outputs is not
  // this object's.
  bool record(const mx::array& x, const std::vector<mx::array>& outputs, nb::handle context) {
    if (x.is_tracer() || outputs.size() != outputs_) {
      return false;
    }
    for (auto& o : outputs) {
      if (o.is_tracer()) {
        return false;
      }
    }
    Tape t = record_tape(x, outputs, context);
    std::erase_if(tapes_, [&](const Tape& old) {
      return old.epoch != g_epoch || (old.stream == t.stream && old.dtype == t.dtype && old.shape == t.shape &&
                                      same(old.context, context));
    });
    if (tapes_.size() >= limit_) {
      tapes_.clear();
    }
    tapes_.push_back(std::move(t));
    return true;
  }

  // The recordings that can still serve (made since the last invalidate()).
  size_t size() const {
    return std::count_if(tapes_.begin(), tapes_.end(), [](const Tape& t) { return t.epoch == g_epoch; });
  }

  void clear() {
    tapes_.clear();
  }

  // What the recordings hold: (steps, constants) for each.
  std::vector<std::vector<size_t>> describe() const {
    std::vector<std::vector<size_t>> out;
    for (auto& t : tapes_) {
      out.push_back({t.steps.size(), t.constants.size()});
    }
    return out;
  }

 private:
  static bool same(const nb::object& recorded, nb::handle context) {
    return recorded.is(context) || recorded.equal(context);
  }

  const Tape* find(const mx::array& x, nb::handle context) const {
    if (tapes_.empty()) {
      return nullptr;
    }
    int stream = current_stream();
    for (auto& t : tapes_) {
      if (t.epoch == g_epoch && t.stream == stream && t.dtype == x.dtype() && t.shape == x.shape() &&
          same(t.context, context)) {
        return x.is_tracer() ? nullptr : &t;
      }
    }
    return nullptr;
  }

  size_t outputs_;
  size_t limit_;
  std::vector<Tape> tapes_;
};

}  // namespace

NB_MODULE(_tape, m) {
  m.doc() = "Replays of recorded MLX graphs (int8nax.backends.tape)";
  nb::class_<Tapes>(m, "Tapes")
      .def(nb::init<size_t, size_t>(), nb::arg("outputs"), nb::arg("limit"))
      .def("__call__", &Tapes::call, nb::arg("x"), nb::arg("context") = nb::none())
      .def("record", &Tapes::record, nb::arg("x"), nb::arg("outputs"), nb::arg("context") = nb::none())
      .def("clear", &Tapes::clear)
      .def("describe", &Tapes::describe)
      .def("__len__", &Tapes::size);
  m.def("invalidate", []() { g_epoch++; }, "Drop every recording of every Tapes object.");
  m.def("is_tracer", [](const mx::array& x) { return x.is_tracer(); }, nb::arg("x"),
        "Whether x is a tracer of a transformation now running (MLX's own test).");
}
