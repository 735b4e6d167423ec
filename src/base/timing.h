#pragma once
// Where a command's time goes: wall seconds per named phase, summed over calls, in the order
// the phases first ran. `tdiff run` and every mixed run of bisect print one line of it on
// stderr, and run's report.json carries it (docs/guide/find-the-broken-operator.md, "Where the time goes").
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace tdiff {

class PhaseTimes {
 public:
  using Clock = std::chrono::steady_clock;

  // Adds the time from construction to destruction (or stop()) to one phase.
  class Scope {
   public:
    Scope(PhaseTimes& t, std::string phase) : t_(&t), phase_(std::move(phase)), t0_(Clock::now()) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    ~Scope() { stop(); }
    void stop() {
      if (t_) t_->add(phase_, std::chrono::duration<double>(Clock::now() - t0_).count());
      t_ = nullptr;
    }

   private:
    PhaseTimes* t_;
    std::string phase_;
    Clock::time_point t0_;
  };

  PhaseTimes() : t0_(Clock::now()) {}
  Scope measure(std::string phase) { return Scope(*this, std::move(phase)); }
  void add(const std::string& phase, double seconds);
  // Every phase of `other`, its name behind `prefix` ("floor " + "candidate").
  void add(const PhaseTimes& other, const std::string& prefix = "");
  double get(const std::string& phase) const;  // 0 when it never ran
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }
  double since_start() const {
    return frozen_ >= 0 ? frozen_ : std::chrono::duration<double>(Clock::now() - t0_).count();
  }
  void restart() { t0_ = Clock::now(), frozen_ = -1; }
  void stop_clock() { frozen_ = since_start(); }  // the work is over: line() prints it later
  // "4.39 s: open 0.05, reference reads 0.41, ..., other 0.02": the wall time since
  // construction (restart()) or `total` when given, every phase of at least 5 ms, and what
  // no phase covered.
  std::string line(double total = -1) const;

 private:
  Clock::time_point t0_;
  double frozen_ = -1;
  std::vector<std::pair<std::string, double>> phases_;
};

}  // namespace tdiff
