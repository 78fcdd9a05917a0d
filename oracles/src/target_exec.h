// An implementation under test in another process, spoken to through the JSON-lines
// protocol of docs/protocol.md. Private to the oracles library.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <span>
#include <string>

#include "shardcheck/oracles/target.h"

namespace shardcheck::oracles {

class ExecTarget final : public Target {
 public:
  ExecTarget(std::string name, std::string command, const TargetOptions& options);
  ~ExecTarget() override;
  ExecTarget(const ExecTarget&) = delete;
  ExecTarget& operator=(const ExecTarget&) = delete;

  // Starts the process and runs the handshake; an error sentence, or "" when it runs.
  std::string start();

  const std::string& name() const override { return name_; }
  bool reads_map_itself() const override { return true; }
  TargetResult<Accepted> check(const TargetMap& map) override;
  TargetResult<TensorAnswer> rebuild(const TargetMap& map, const ShardSet& shards, DType dtype,
                               int scale_power, const DigestRequest& digest) override;
  TargetResult<TensorAnswer> extract(const TargetMap& map, const Buffer& full, Rank rank,
                               int scale_power) override;
  // Rebuild and extract always; reshard when the handshake lists it in `ops`.
  bool supports(Op op) const override;
  TargetResult<Resharded> reshard(const TargetMap& source, const TargetMap& target, const ShardSet& shards,
                                  DType dtype, int scale_power, const DigestRequest& digest) override;

  void detach() override;

  // What the handshake said the process is ("deepspeed 0.19.8 ...").
  const std::string& implementation() const { return implementation_; }
  // Processes started so far (restarts after a fault included).
  int starts() const { return starts_; }

 private:
  using Clock = std::chrono::steady_clock;

  // One request/response exchange: the response object, a refusal, or a fault.
  // `expected_bytes` (the size of a result tensor) bounds how long a line may grow.
  TargetResult<Json> exchange(Json request, double timeout_seconds, std::size_t expected_bytes);
  // exchange's steps. A fault for output that came before the request was sent.
  std::optional<TargetFault> unsolicited_output();
  // The request sent (as far as the process read it) and the first line it answered.
  struct Sent {
    std::size_t bytes = 0;
    std::string line;
  };
  std::variant<Sent, TargetFault> send_and_read_line(const std::string& out, const std::string& op,
                                                    double timeout_seconds, std::size_t expected_bytes);
  // The answer line as the protocol reads it: the response object, a refusal, or a fault.
  TargetResult<Json> answer_of(const Sent& sent, bool whole_request_sent, std::int64_t id, const std::string& op);
  TargetResult<TensorAnswer> tensor_request(Json request, DType dtype, Index expected_numel);
  // A fault for a well-formed line whose content the protocol does not allow.
  TargetFault garbage_answer(const std::string& op, const Json& response, std::string reason, std::string what);
  std::string spawn();
  // Ends the process: closes its stdin and waits up to `grace`, then kills its group.
  void stop(std::chrono::milliseconds grace);
  TargetFault reap_as_crash(std::string what);
  // The crash a fork server reported in `line` (docs/protocol.md, "Fork servers"):
  // its reason ("signal-11"), or nullopt when the line is no such report.
  std::optional<std::string> crash_report(const std::string& line) const;
  TargetFault child_crashed(std::string what, const std::string& reason);
  void drain_stderr();
  std::string stderr_tail() const;

  std::string name_;
  std::string command_;
  TargetOptions options_;
  std::string implementation_;
  // The handshake's `ops`: without it, rebuild and extract; with it, what it lists.
  bool serves_rebuild_ = true;
  bool serves_extract_ = true;
  bool serves_reshard_ = false;
  bool crash_reports_ = false;   // the handshake says "crash_reports": a fork server
  pid_t pid_ = -1;
  int io_fd_ = -1;   // the process's stdin and stdout (one socket)
  int err_fd_ = -1;  // its stderr
  std::string err_tail_;
  std::string pending_;  // bytes read past the last response line
  std::int64_t next_id_ = 1;
  int starts_ = 0;
};

}  // namespace shardcheck::oracles
