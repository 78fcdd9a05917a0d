// Processes an implementation under test leaves behind. A target runs in a process group
// of its own, which a kill of the group ends, but a descendant that calls setsid() leaves
// the group, and one whose parent is gone is handed to init: neither would be ended. A
// process that starts targets or campaign workers is therefore a child subreaper
// (PR_SET_CHILD_SUBREAPER, Linux 3.4): its orphaned descendants are handed to it instead,
// and it ends every child it did not fork itself. Not a PID namespace (it needs
// privileges a CI runner may not give) nor a cgroup (it needs a delegated hierarchy): a
// subreaper needs neither, and each process of the tree ends its strays as it goes.
#pragma once

#include <sys/types.h>

namespace shardcheck::oracles {

// Makes this process the reaper of its orphaned descendants (once; idempotent).
void adopt_orphans();

// fork(), the child recorded as one of this process's own (until forget_own_child),
// which end_stray_children leaves alone; in the child nothing is recorded. Thread-safe
// against end_stray_children: a child forked by another thread is never taken for a stray.
pid_t fork_own_child();
// After the child is reaped.
void forget_own_child(pid_t child);

// Kills (SIGKILL) and reaps every child of this process not recorded as its own, again
// and again (a killed child's children are handed over in turn) until none is left;
// `all`: the recorded ones too. Returns how many it ended.
int end_stray_children(bool all = false);

}  // namespace shardcheck::oracles
