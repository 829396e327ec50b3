{#-
    The latency SLA of every table's contract, in hours (--vars freshness_sla_hours, filled
    from the contracts by the build), as rows (table_name, sla_hours).
-#}
{% macro freshness_slas() -%}
    {%- set slas = var('freshness_sla_hours', {}) -%}
    {%- if slas -%}
    select * from (values
        {%- for table_name, hours in slas.items() %}
        ('{{ table_name }}', cast({{ hours }} as double)){% if not loop.last %},{% endif %}
        {%- endfor %}
    ) as slas (table_name, sla_hours)
    {%- else -%}
    select cast(null as varchar) as table_name, cast(null as double) as sla_hours where false
    {%- endif -%}
{%- endmacro %}
