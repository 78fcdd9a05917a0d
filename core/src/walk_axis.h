// One axis of a shape read through two views, the one type every two-view walk steps
// through: the CPU backend's slabs and element walk (two_view_walk.h), the row plans of
// the wide path and the planner (row_plan.h), and the device code's work items
// (device/device_kernels.h), which nvcc compiles too. A plain aggregate with no member
// functions, so it needs no SHARDCHECK_HD and has the same layout in host and device code:
// the device backend hands its host vector of these to the device as it is. Internal to
// core.
#pragma once

#include "shardcheck/types.h"

namespace shardcheck::detail {

struct WalkAxis {
  Index extent;
  Index from_stride;
  Index to_stride;
};

}  // namespace shardcheck::detail
