{#-
    The days this run builds (--vars days: [...]); a mart reads and writes only these partitions.
    `days_before` widens the read to that many days before each built day, for the marts that look
    back (a chain begun the day before, a trailing baseline): the days stay constants, so only
    those partitions of the lake are read.
-#}
{% macro in_build_days(column, days_before=0) -%}
    {%- set days = [] -%}
    {%- for day in var('days') -%}
        {%- for back in range(days_before + 1) -%}
            {%- set read = (modules.datetime.date.fromisoformat(day) - modules.datetime.timedelta(days=back)).isoformat() -%}
            {%- if read not in days %}{% do days.append(read) %}{% endif -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- if days -%}
    {{ column }} in ({% for day in days | sort %}date '{{ day }}'{% if not loop.last %}, {% endif %}{% endfor %})
    {%- else -%}
    false
    {%- endif -%}
{%- endmacro %}
