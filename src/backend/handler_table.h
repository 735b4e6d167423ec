#pragma once
// A backend's dispatch: one handler per operator kind, registered by the backend's family
// files (attention.cpp registers `attention`, moe.cpp the MoE kinds, ...), so that run() is a
// lookup and adding a kind means one registration in its family's file. `Call` is what a
// backend hands its handlers (the stage, its inputs, the backend's own state).
// build_handler_table() fills a table family by family in the operator table's order and
// checks each family against model/op_table.h: a kind registered by another family's file,
// twice, or by nobody is a programming error when the table is first built.
#include <array>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/op_table.h"
#include "model/stage_graph.h"
#include "base/tensor.h"

namespace tdiff {

template <class Call>
class HandlerTable {
 public:
  using Handler = std::function<std::vector<Tensor>(Call&)>;

  explicit HandlerTable(std::string backend) : backend_(std::move(backend)) {}

  // A kind registered twice, or by another family's registration, is a programming error.
  void add(OpKind kind, Handler h) {
    auto& slot = handlers_[static_cast<std::size_t>(kind)];
    if (slot) throw std::logic_error(fmt::format("{}: two handlers for {}", backend_, op_kind_name(kind)));
    if (family_ && op_info(kind).family != *family_)
      throw std::logic_error(fmt::format("{}: the {} family registers {}, a kind of family {}", backend_,
                                         op_family_name(*family_), op_kind_name(kind), op_family_name(op_info(kind).family)));
    slot = std::move(h);
  }
  void add(std::initializer_list<OpKind> kinds, const Handler& h) {
    for (OpKind k : kinds) add(k, h);
  }
  bool has(OpKind kind) const { return static_cast<bool>(handlers_[static_cast<std::size_t>(kind)]); }

  // While set, add() accepts only kinds of this family (build_handler_table sets it).
  void expect_family(std::optional<OpFamily> f) { family_ = f; }

  std::vector<Tensor> run(const Stage& s, Call& call) const {
    const auto& h = handlers_[static_cast<std::size_t>(s.kind)];
    if (!h)
      throw std::logic_error(fmt::format("{}: no implementation for stage {} ({})", backend_, s.name, op_kind_name(s.kind)));
    return h(call);
  }

 private:
  std::string backend_;
  std::array<Handler, kOpKindCount> handlers_{};
  std::optional<OpFamily> family_;
};

// One registration function per family, in OpFamily order.
template <class Call>
using FamilyRegistrars = std::array<void (*)(HandlerTable<Call>&), kOpFamilyCount>;

// The table of a backend that implements every kind: each family's registration may add only
// its own kinds, and afterwards every kind must have its handler.
template <class Call>
HandlerTable<Call> build_handler_table(std::string backend, const FamilyRegistrars<Call>& families) {
  HandlerTable<Call> table(backend);
  for (std::size_t f = 0; f < kOpFamilyCount; ++f) {
    table.expect_family(static_cast<OpFamily>(f));
    families[f](table);
  }
  table.expect_family(std::nullopt);
  for (std::size_t k = 0; k < kOpKindCount; ++k)
    if (!table.has(static_cast<OpKind>(k)))
      throw std::logic_error(fmt::format("{}: no handler for {} (family {})", backend, op_kind_name(static_cast<OpKind>(k)),
                                         op_family_name(op_info(static_cast<OpKind>(k)).family)));
  return table;
}

}  // namespace tdiff
