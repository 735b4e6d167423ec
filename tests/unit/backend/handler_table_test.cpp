// backend/handler_table.h: the family-by-family build checks each backend's registrations
// against the operator table.
#include <gtest/gtest.h>

#include <stdexcept>

#include "backend/handler_table.h"
#include "emu/emu_backend.h"
#include "refcpu/refcpu_backend.h"

namespace tdiff {
namespace {

struct ToyCall {};
using Toy = HandlerTable<ToyCall>;

std::vector<Tensor> nothing(ToyCall&) { return {}; }

// Every family registers its own kinds, read from the operator table.
template <OpFamily F>
void own_kinds(Toy& t) {
  for (std::size_t k = 0; k < kOpKindCount; ++k)
    if (op_info(static_cast<OpKind>(k)).family == F) t.add(static_cast<OpKind>(k), nothing);
}

FamilyRegistrars<ToyCall> complete() {
  using F = OpFamily;
  return {own_kinds<F::embedding>, own_kinds<F::hyper_connection>, own_kinds<F::rope>, own_kinds<F::mask>,
          own_kinds<F::norm>,      own_kinds<F::linear>,           own_kinds<F::compressor>, own_kinds<F::indexer>,
          own_kinds<F::attention>, own_kinds<F::moe>};
}

std::string error_of(const FamilyRegistrars<ToyCall>& r) {
  try {
    build_handler_table<ToyCall>("toy", r);
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "";
}

TEST(HandlerTable, EveryKindFromItsOwnFamily) {
  const Toy t = build_handler_table<ToyCall>("toy", complete());
  for (std::size_t k = 0; k < kOpKindCount; ++k) EXPECT_TRUE(t.has(static_cast<OpKind>(k)));
}

TEST(HandlerTable, AKindInAnotherFamilysFileIsRefused) {
  auto r = complete();
  r[static_cast<std::size_t>(OpFamily::norm)] = [](Toy& t) {
    own_kinds<OpFamily::norm>(t);
    t.add(OpKind::attention, nothing);
  };
  EXPECT_EQ(error_of(r), "toy: the norm family registers attention, a kind of family attention");
}

TEST(HandlerTable, AMissingKindIsRefused) {
  auto r = complete();
  r[static_cast<std::size_t>(OpFamily::moe)] = [](Toy& t) { t.add(OpKind::router, nothing); };
  EXPECT_NE(error_of(r).find("toy: no handler for moe_select (family moe)"), std::string::npos) << error_of(r);
}

TEST(HandlerTable, CpuBackendsImplementEveryKind) {
  const refcpu::RefCpuBackend ref;
  const emu::EmuBackend emu(Policy::preset("fixed"), 1);
  for (std::size_t k = 0; k < kOpKindCount; ++k) {
    EXPECT_TRUE(ref.implements(static_cast<OpKind>(k))) << op_kind_name(static_cast<OpKind>(k));
    EXPECT_TRUE(emu.implements(static_cast<OpKind>(k))) << op_kind_name(static_cast<OpKind>(k));
  }
}

}  // namespace
}  // namespace tdiff
