--[[ jobstream job_submit.lua: Slurm's job_submit/lua plugin (JobSubmitPlugins=lua).

Records, one JSON line each, in the jobstream Slurm edge's submit spool:
  * every change of a queued job (slurm_job_modify: the job id, and the fields the change
    sets: time limit, partition, qos, account, name, priority, nice, hold, release);
  * every submission the site's policy refused (no job id exists yet: uid, user,
    partition and the policy's message).

slurmctld runs this inside its locks, one call at a time, so it does no network I/O and
never waits: one append of one line under PIPE_BUF (4096 bytes) to a local file, which
O_APPEND keeps whole. Everything of ours runs under pcall; a broken or absent edge or
spool never changes what Slurm decides.

The site's own policy: put the site's unchanged job_submit.lua at SITE_POLICY (e.g.
/etc/slurm/job_submit.site.lua). It is loaded once, here; its slurm_job_submit and
slurm_job_modify decide, and their slurm.log_user() message (or a second return value)
is the recorded reason of a refusal. If the site file exists but does not load, every
submission is refused, as Slurm would refuse them with a broken job_submit.lua.

`jobstream edge install-lua DIR` writes this file with the configured paths.
]]

local SPOOL_DIR = "/var/spool/jobstream/submit-spool" -- jobstream:submit_spool_dir
local SITE_POLICY = "/etc/slurm/job_submit.site.lua" -- jobstream:site_policy

local SPOOL_FILE = SPOOL_DIR .. "/slurmctld.log"
local NO_VAL = 4294967294
local INFINITE = 4294967295
local NICE_OFFSET = 2147483648
local MAX_LINE = 4000 -- below PIPE_BUF: one write(2), never interleaved

-- The JSON encoder: jobstream_json.lua from this script's own directory, where
-- install-lua writes both, with package.path put back at once for the site's policy;
-- without it slurmctld records nothing (append runs under pcall) and decides as before.
local here = string.match(debug.getinfo(1, "S").source, "^@(.*/)") or "./"
local saved_path = package.path
package.path = here .. "?.lua"
local found, json = pcall(require, "jobstream_json")
package.path, json = saved_path, found and json or nil

local function append(fields)
    local line = json.line(fields)
    if #line > MAX_LINE then
        fields.job_name, fields.reason = nil, fields.reason and string.sub(fields.reason, 1, 200)
        line = json.line(fields)
        if #line > MAX_LINE then return end
    end
    local f = io.open(SPOOL_FILE, "a")
    if not f then return end
    f:write(line)
    f:close()
end

local function get(obj, key)
    local ok, value = pcall(function() return obj[key] end)
    if ok then return value end
    return nil
end

-- A number job_desc states, nil for Slurm's "not set" values.
local function set_number(value)
    if type(value) ~= "number" or value == NO_VAL or value >= 1.8e19 then return nil end
    return value
end

local function set_string(value)
    if type(value) ~= "string" or value == "" then return nil end
    return value
end

-- The site's policy, loaded without disturbing ours: its slurm_job_submit and
-- slurm_job_modify globals are taken, then ours are defined over them.
local site_submit, site_modify, site_error
do
    local f = io.open(SITE_POLICY, "r")
    if f then
        f:close()
        local ok, err = pcall(dofile, SITE_POLICY)
        if ok then
            site_submit, site_modify = slurm_job_submit, slurm_job_modify
        else
            site_error = "site policy " .. SITE_POLICY .. " failed to load: " .. tostring(err)
            pcall(slurm.log_error, "jobstream job_submit.lua: %s", site_error)
        end
    end
end

-- Call the site's function, capturing the message it gives the user.
local function call_site(fn, ...)
    if site_error then return slurm.ERROR, site_error end
    if not fn then return slurm.SUCCESS, nil end
    local said
    local log_user = slurm.log_user
    slurm.log_user = function(fmt, ...)
        local ok, text = pcall(string.format, fmt, ...)
        said = ok and text or tostring(fmt)
        return log_user(fmt, ...)
    end
    local ok, rc, reason = pcall(fn, ...)
    slurm.log_user = log_user
    if not ok then
        -- Slurm refuses when its job_submit.lua raises: so does the chained policy
        pcall(slurm.log_error, "jobstream job_submit.lua: site policy: %s", tostring(rc))
        return slurm.ERROR, "site policy error: " .. tostring(rc)
    end
    if rc == nil then rc = slurm.SUCCESS end
    return rc, reason or said
end

local function record_refusal(job_desc, submit_uid, rc, reason)
    append({
        kind = "refused", time = os.time(), uid = submit_uid,
        user = set_string(get(job_desc, "user_name")),
        partition = set_string(get(job_desc, "partition")),
        account = set_string(get(job_desc, "account")),
        job_name = set_string(get(job_desc, "name")),
        reason = (reason and tostring(reason)) or ("error code " .. tostring(rc)),
    })
end

local function record_change(job_desc, job_rec, modify_uid)
    local fields = {
        kind = "modify", time = os.time(), job_id = get(job_rec, "job_id"),
        uid = get(job_rec, "user_id"), by_uid = modify_uid,
        time_limit = set_number(get(job_desc, "time_limit")),
        partition = set_string(get(job_desc, "partition")),
        qos = set_string(get(job_desc, "qos")),
        account = set_string(get(job_desc, "account")),
        job_name = set_string(get(job_desc, "name")),
    }
    local priority = set_number(get(job_desc, "priority"))
    if priority == 0 then
        fields.hold = true
    elseif priority == INFINITE then
        fields.release = true
    elseif priority then
        fields.priority = priority
    end
    local nice = set_number(get(job_desc, "nice"))
    if nice and nice ~= INFINITE then fields.nice = nice - NICE_OFFSET end
    append(fields)
end

function slurm_job_submit(job_desc, part_list, submit_uid)
    local rc, reason = call_site(site_submit, job_desc, part_list, submit_uid)
    if rc ~= slurm.SUCCESS then
        pcall(record_refusal, job_desc, submit_uid, rc, reason)
    end
    return rc
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    local rc = call_site(site_modify, job_desc, job_rec, part_list, modify_uid)
    if rc == slurm.SUCCESS then
        pcall(record_change, job_desc, job_rec, modify_uid)
    end
    return rc
end

return slurm.SUCCESS
