--[[ jobstream_json.lua: the JSON lines of jobstream's Slurm lua plugins.

job_submit.lua and cli_filter.lua both write one JSON object per line to the submit
spool (pipeline/parsers/slurm_submit.py reads them); this is the one encoder they share.
`jobstream edge install-lua DIR` writes it beside them, and each loads it from its own
directory (Slurm loads the plugins from slurm.conf's).

Lua 5.1 (what Slurm's lua plugins link) has only doubles: an integer is written as one
only where a double holds it exactly, -2^53 .. 2^53; anything else is left out.
]]

local M = {}

local MAX_EXACT = 9007199254740992 -- 2^53

-- A JSON string: control characters, quote and backslash as \u escapes.
function M.string(s)
    return '"' .. string.gsub(s, '[%c"\\]', function(c)
        return string.format("\\u%04x", string.byte(c))
    end) .. '"'
end

-- One JSON object of strings, integers and booleans, and a newline; anything else is
-- left out.
function M.line(fields)
    local parts = {}
    for key, value in pairs(fields) do
        local t = type(value)
        local text
        if t == "string" then
            text = M.string(value)
        elseif t == "boolean" then
            text = tostring(value)
        elseif t == "number" and value == math.floor(value) and value >= -MAX_EXACT
                and value <= MAX_EXACT then
            text = string.format("%.0f", value)
        end
        if text then
            parts[#parts + 1] = M.string(key) .. ":" .. text
        end
    end
    return "{" .. table.concat(parts, ",") .. "}\n"
end

return M
