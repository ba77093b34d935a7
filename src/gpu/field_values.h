// The NVML field values gpupool reads and the readings they fill (machine/gpu_readings.h).
// Header-only: the backend asks for them and the simulated NVML answers from the same table.
#pragma once

#include "nvml/nvml_api.h"

// F(NVML field id, reading): the NVLink error totals over all of a GPU's links.
#define GPUPOOL_NVLINK_ERROR_FIELDS(F)                                 \
  F(NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, nvlink_crc_flit_errors) \
  F(NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, nvlink_crc_data_errors) \
  F(NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, nvlink_replay_errors)     \
  F(NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, nvlink_recovery_errors)
