// Everything comm in one include: stores, process groups, the Gloo and NCCL backends,
// initialisation.
#pragma once

#include "comm/call_check.h"
#include "comm/init.h"
#include "comm/launch_env.h"
#include "comm/process_group.h"
#include "comm/gloo/process_group_gloo.h"
#include "comm/nccl/process_group_nccl.h"
#include "comm/store.h"
#include "comm/tcp_store.h"
