// Everything comm in one include: stores, process groups, the Gloo and NCCL backends,
// initialisation.
#pragma once

#include "tinyddp/comm/desync_check.h"
#include "tinyddp/comm/distributed.h"
#include "tinyddp/comm/future.h"
#include "tinyddp/comm/gloo/process_group_gloo.h"
#include "tinyddp/comm/init.h"
#include "tinyddp/comm/launch_env.h"
#include "tinyddp/comm/nccl/process_group_nccl.h"
#include "tinyddp/comm/process_group.h"
#include "tinyddp/comm/process_group_wrapper.h"
#include "tinyddp/comm/store.h"
#include "tinyddp/comm/tcp_store.h"
