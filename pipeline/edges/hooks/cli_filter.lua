--[[ jobstream cli_filter.lua: Slurm's cli_filter/lua plugin (CliFilterPlugins=lua).

sbatch, salloc and srun run it as the submitting user on the submit host. After slurmctld
gave the job its id, slurm_cli_post_submit appends one JSON line (the job id, the uid and
what was asked: partition, account, qos, name, time limit, hold) to <uid>.log in the
jobstream Slurm edge's submit spool: a local directory, sticky and writable by all
(mode 1733), that the edge on this host picks up. The edge trusts a line only from the
file its uid owns.

It never fails a submission and never waits: no network, one append of one line under
PIPE_BUF, everything under pcall, slurm.SUCCESS always. Without the spool directory (no
edge on this host) the line is simply not written.

`jobstream edge install-lua DIR` writes this file with the configured path.
]]

local SPOOL_DIR = "/var/spool/jobstream/submit-spool" -- jobstream:submit_spool_dir

local MAX_LINE = 4000

-- The JSON encoder (jobstream_json.lua, which install-lua writes beside this file in
-- slurm.conf's directory), looked up there alone and only for this require; without it
-- the clients record nothing (record runs under pcall) and submit as before.
local here = string.match(debug.getinfo(1, "S").source, "^@(.*/)") or "./"
local saved_path = package.path
package.path = here .. "?.lua"
local found, json = pcall(require, "jobstream_json")
package.path, json = saved_path, found and json or nil

-- The real uid, from the kernel: the environment's USER is the user's to change.
local function my_uid()
    local f = io.open("/proc/self/status", "r")
    if not f then return nil end
    local text = f:read("*a")
    f:close()
    return tonumber(string.match(text, "\nUid:%s+(%d+)"))
end

-- The options of a submission, kept from pre_submit (which sees them) for post_submit
-- (which, in Slurm 22.05 and later, gets only the offset of the het component).
local wanted = {
    partition = "partition", account = "account", qos = "qos", ["job-name"] = "job_name",
    time = "time_str", hold = "hold",
}

local function request_of(options)
    local request = {}
    for option, key in pairs(wanted) do
        local ok, value = pcall(function() return options[option] end)
        if ok and type(value) == "string" and value ~= "" then
            request[key] = value
        elseif ok and type(value) == "boolean" then
            request[key] = value and "true" or "false"
        end
    end
    return request
end

local stored = {}

local function remember(options, offset)
    local request = request_of(options)
    stored[offset or 0] = request
    -- slurm.cli_store keeps it across srun's het components as well
    local text = {}
    for key, value in pairs(request) do text[#text + 1] = key .. "=" .. value end
    pcall(slurm.cli_store, offset or 0, table.concat(text, "\31"))
end

local function recall(offset)
    if stored[offset or 0] then return stored[offset or 0] end
    local ok, text = pcall(slurm.cli_retrieve, offset or 0)
    local request = {}
    if ok and type(text) == "string" then
        for item in string.gmatch(text, "[^\31]+") do
            local key, value = string.match(item, "^([%w_]+)=(.*)$")
            if key then request[key] = value end
        end
    end
    return request
end

local function record(offset_or_options, job_id, step_id)
    local request
    if type(offset_or_options) == "table" or type(offset_or_options) == "userdata" then
        request = request_of(offset_or_options)
    else
        request = recall(offset_or_options)
    end
    local uid = my_uid()
    if not uid or not tonumber(job_id) then return end
    -- Slurm's option getters answer "set"/"unset" for flags, and a word for an unset
    -- time limit: only a limit as a user types it is passed on
    local hold = request.hold == "set" or request.hold == "true" or request.hold == "1"
    local time_str = request.time_str
    if time_str and not string.match(time_str, "^[%d:-]+$") then time_str = nil end
    local fields = {
        kind = "submit", time = os.time(), job_id = tonumber(job_id), uid = uid,
        partition = request.partition, account = request.account, qos = request.qos,
        job_name = request.job_name, time_str = time_str, hold = hold or nil,
        step_id = tonumber(step_id),
    }
    local line = json.line(fields)
    if #line > MAX_LINE then
        fields.job_name = nil
        line = json.line(fields)
        if #line > MAX_LINE then return end
    end
    local f = io.open(SPOOL_DIR .. "/" .. uid .. ".log", "a")
    if not f then return end
    f:write(line)
    f:close()
end

function slurm_cli_setup_defaults(options, early_pass)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
    pcall(remember, options, offset)
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
    pcall(record, offset, job_id, step_id)
    return slurm.SUCCESS
end
