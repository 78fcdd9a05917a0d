// Reducing a case while what it shows holds (issue 49: findings that shrink), as
// creduce and llvm-reduce reduce an input while a predicate holds: edits of the case file
// are tried one by one, each kept when the edited case still shows it, until none is.
//
// The edits, in the order they are tried (largest first): remove a rank (from every map
// of the case, and its supplied shard), remove a piece, remove an optional member (a
// piece's scale, a rank's shard_shape, a map's content_digests), remove an axis (from the
// logical shape, every piece's shape and both strides, and every shard shape of the same
// rank), lower an integer of a map (to 0, 1 or half), zero the supplied values,
// set scale_power to 1, keep one of several operations, and make the dtype float32 or
// uint8. An edit of a map is tried on every map of the case that has the same field with
// the same value at once (the map under test and its truth move together), then on each
// alone. Provenance (name, constructor, corruption, expectations) is never edited.
//
// A result is locally minimal when the last full pass over every edit kept none: no
// single edit keeps what the case shows. The number of predicate calls is bounded; the
// result says whether the bound was reached first. Deterministic: the same case and
// predicate give the same result.
#pragma once

#include <functional>

#include "shardcheck/case.h"
#include "shardcheck/json.h"
#include "shardcheck/properties.h"

namespace shardcheck::props {

// Predicate calls per reduction unless told otherwise (`shardcheck reduce`, campaigns): a
// legacy campaign's findings (seed 1, 20,000 cases: 562) all end locally minimal within it,
// after 308 calls each on average and 4,674 at most.
inline constexpr Index kDefaultMaxEvaluations = 5000;

struct ReduceOptions {
  Index max_evaluations = kDefaultMaxEvaluations;  // predicate calls, the first (on the case as given) included
};

struct Reduced {
  Case reduced;
  Index steps = 0;        // edits kept
  Index evaluations = 0;  // predicate calls
  bool minimal = false;   // the last full pass kept no edit (false: the bound came first)
  bool shows = false;     // the case as given showed it at all (else it is returned as given)
};

// `shows`: whether a case still shows what is kept (a signature, a verdict).
Reduced reduce_case(const Case& given, const std::function<bool(const Case&)>& shows,
                    const ReduceOptions& options = {});

// What a case shows under an implementation: its finding's signature (empty: none), how
// it ended and the kind it was refused with. Signatures name the case's provenance (its
// constructor and corruption), which no edit changes, so the outcome and the refusal's
// kind are kept too: a reduction that slipped from an overflow refused `format` to an
// empty tensor refused `shape` keeps the signature but not what the finding was.
struct Shown {
  std::string signature;
  Outcome category = Outcome::exact;
  std::optional<ErrorKind> refusal;
  friend bool operator==(const Shown&, const Shown&) = default;
};
Shown shown_by(const Case& c, const EvalOptions& eval);

// The predicate of reduce_case: the case shows `shown` under `eval`.
std::function<bool(const Case&)> keeps_what_it_shows(Shown shown, EvalOptions eval);

// The edits reduce_case tries on `case_file` (a case's JSON), each as an edited copy: for a
// test that checks local minimality, and for reduce_case itself.
std::vector<Json> case_edits(const Json& case_file);

}  // namespace shardcheck::props
