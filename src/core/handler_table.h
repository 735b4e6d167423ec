#pragma once
// A backend's dispatch: one handler per operator kind, registered by the backend's family
// files (attention.cpp registers `attention`, moe.cpp the MoE kinds, ...), so that run() is a
// lookup and adding a kind means one registration in its family's file. `Call` is what a
// backend hands its handlers (the stage, its inputs, the backend's own state).
#include <array>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/stage_graph.h"
#include "core/tensor.h"

namespace tdiff {

template <class Call>
class HandlerTable {
 public:
  using Handler = std::function<std::vector<Tensor>(Call&)>;

  explicit HandlerTable(std::string backend) : backend_(std::move(backend)) {}

  // A kind registered twice is a programming error.
  void add(OpKind kind, Handler h) {
    auto& slot = handlers_[static_cast<std::size_t>(kind)];
    if (slot) throw std::logic_error(fmt::format("{}: two handlers for {}", backend_, op_kind_name(kind)));
    slot = std::move(h);
  }
  void add(std::initializer_list<OpKind> kinds, const Handler& h) {
    for (OpKind k : kinds) add(k, h);
  }
  bool has(OpKind kind) const { return static_cast<bool>(handlers_[static_cast<std::size_t>(kind)]); }

  std::vector<Tensor> run(const Stage& s, Call& call) const {
    const auto& h = handlers_[static_cast<std::size_t>(s.kind)];
    if (!h)
      throw std::logic_error(fmt::format("{}: no implementation for stage {} ({})", backend_, s.name, op_kind_name(s.kind)));
    return h(call);
  }

 private:
  std::string backend_;
  std::array<Handler, kOpKindCount> handlers_{};
};

}  // namespace tdiff
